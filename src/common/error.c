/* tw_strerror / tw_strerror_name: one table, so a name and its text never drift. */
#include <errno.h>
#include <string.h>

#include "common/verdict.h"

struct err_entry {
    int code;
    const char *name;
    const char *text;
};

static const struct err_entry table[] = {
    {TW_OK, "OK", "success"},
    {TW_ENOTFOUND, "NOT_FOUND", "no such tensor"},
    {TW_EDEVICE, "DEVICE_UNAVAILABLE", "the requested device cannot be used"},
    {TW_EPROTO, "PROTOCOL_ERROR", "protocol error"},
    {TW_EINVAL, "INVALID_ARGUMENT", "invalid argument"},
    {TW_ECAPACITY, "CAPACITY_EXCEEDED", "capacity exceeded"},
    {TW_EUNAUTHORIZED, "UNAUTHORIZED", "authentication required or failed"},
    {TW_ETIMEDOUT, "TIMEOUT", "deadline exceeded"},
    {TW_EBUSY, "BUSY", "too many requests in flight or too many connections"},
    {TW_EINTERNAL, "INTERNAL", "internal error"},
    {TW_ECHECKSUM, "CHECKSUM_MISMATCH", "payload checksum mismatch"},
    {TW_EVERSION, "UNSUPPORTED_VERSION", "unsupported protocol version"},
    {TW_ESHUTDOWN, "SHUTTING_DOWN", "the server is shutting down"},
    {TW_ECANCELLED, "CANCELLED", "the transfer was cancelled by the peer"},
    {TW_EAGAIN_FRAME, "EAGAIN_FRAME", "frame incomplete: more bytes needed"},
    {TW_EBAD_MAGIC, "EBAD_MAGIC", "bad frame magic"},
    {TW_EBAD_VERSION, "EBAD_VERSION", "unsupported frame version"},
    {TW_EUNKNOWN_TAG, "EUNKNOWN_TAG", "unknown message tag"},
    {TW_EFRAME_TOO_LARGE, "EFRAME_TOO_LARGE", "frame payload larger than the negotiated limit"},
    {TW_EBAD_FLAGS, "EBAD_FLAGS", "reserved flag bits set"},
    {TW_EBAD_LENGTH, "EBAD_LENGTH", "payload length does not match its fields"},
    {TW_EBAD_NAME, "EBAD_NAME",
     "tensor name empty, too long, not valid UTF-8, or with a control character"},
    {TW_EBAD_DTYPE, "EBAD_DTYPE", "unknown dtype"},
    {TW_EBAD_SHAPE, "EBAD_SHAPE", "shape does not match byte length or too many dimensions"},
    {TW_EOVERFLOW, "EOVERFLOW", "shape product overflows 64 bits"},
    {TW_EBAD_DEVICE_TAG, "EBAD_DEVICE_TAG", "malformed device tag"},
    {TW_EBAD_CAPS, "EBAD_CAPS", "RDMA_GPUDIRECT announced without RDMA_DATA_PLANE"},
    {TW_EBAD_FIELD, "EBAD_FIELD", "field outside its allowed values"},
    {TW_EBAD_DIRECTION, "EBAD_DIRECTION", "message not allowed in this direction"},
    {TW_EOUT_OF_ORDER, "EOUT_OF_ORDER", "message out of order"},
    {TW_EUNKNOWN_REQUEST, "EUNKNOWN_REQUEST", "no such request in flight"},
    {TW_EDUP_REQUEST, "EDUP_REQUEST", "request id reused or not increasing"},
    {TW_ETOO_MANY_INFLIGHT, "ETOO_MANY_INFLIGHT", "too many requests in flight"},
    {TW_ENOT_NEGOTIATED, "ENOT_NEGOTIATED", "feature used without its negotiated capability"},
    {TW_EBAD_REQUEST_ID, "EBAD_REQUEST_ID",
     "request id zero where required or non-zero where forbidden"},
    {TW_ENOFABRIC, "ENOFABRIC", "no usable RDMA data plane"},
};

static const struct err_entry *find(int err)
{
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (table[i].code == err)
            return &table[i];
    return NULL;
}

/* errno names for the codes tensorwire passes through most often. */
static const char *errno_name(int e)
{
    switch (e) {
    case EPERM:
        return "EPERM";
    case ENOENT:
        return "ENOENT";
    case EINTR:
        return "EINTR";
    case EIO:
        return "EIO";
    case EBADF:
        return "EBADF";
    case EAGAIN:
        return "EAGAIN";
    case ENOMEM:
        return "ENOMEM";
    case EACCES:
        return "EACCES";
    case EFAULT:
        return "EFAULT";
    case EBUSY:
        return "EBUSY";
    case EEXIST:
        return "EEXIST";
    case EINVAL:
        return "EINVAL";
    case ENFILE:
        return "ENFILE";
    case EMFILE:
        return "EMFILE";
    case ENOSPC:
        return "ENOSPC";
    case EPIPE:
        return "EPIPE";
    case ERANGE:
        return "ERANGE";
    case ENOSYS:
        return "ENOSYS";
    case EMSGSIZE:
        return "EMSGSIZE";
    case EPROTO:
        return "EPROTO";
    case ENOTSUP:
        return "ENOTSUP";
    case EADDRINUSE:
        return "EADDRINUSE";
    case EADDRNOTAVAIL:
        return "EADDRNOTAVAIL";
    case ENETUNREACH:
        return "ENETUNREACH";
    case ECONNABORTED:
        return "ECONNABORTED";
    case ECONNRESET:
        return "ECONNRESET";
    case ENOBUFS:
        return "ENOBUFS";
    case ENOTCONN:
        return "ENOTCONN";
    case ETIMEDOUT:
        return "ETIMEDOUT";
    case ECONNREFUSED:
        return "ECONNREFUSED";
    case EHOSTUNREACH:
        return "EHOSTUNREACH";
    case EALREADY:
        return "EALREADY";
    case EINPROGRESS:
        return "EINPROGRESS";
    case ECANCELED:
        return "ECANCELED";
    case EOVERFLOW:
        return "EOVERFLOW";
    case ENODEV:
        return "ENODEV";
    case ENXIO:
        return "ENXIO";
    case E2BIG:
        return "E2BIG";
    default:
        return NULL;
    }
}

const char *tw_strerror(int err)
{
    const struct err_entry *e = find(err);
    if (e)
        return e->text;
    if (err < 0 && err > -TW_WIRE_ERROR_BASE)
        return strerror(-err);
    return "unknown error";
}

const char *tw_strerror_name(int err)
{
    const struct err_entry *e = find(err);
    if (e)
        return e->name;
    if (err < 0 && err > -TW_WIRE_ERROR_BASE) {
        const char *n = errno_name(-err);
        if (n)
            return n;
        return "ERRNO";
    }
    return "UNKNOWN";
}
