/*
 * tensorwire error codes.
 *
 * Every tensorwire function that can fail returns 0 (or a non-negative count)
 * on success and a negative code on failure. Two ranges exist:
 *
 *   -1 .. -999      a negated errno value (-ECONNREFUSED, -ENOMEM, ...),
 *                   converted once, at the system call that failed;
 *   -1000 .. -1099  a protocol error code: -(TW_WIRE_ERROR_BASE + wire code),
 *                   so the code a peer sent in an ERROR message maps 1:1;
 *   -1100 .. -1199  a local verdict on what the peer sent: malformed or
 *                   out-of-order input, a feature used without negotiating
 *                   it, no usable RDMA data plane. The individual codes are
 *                   internal and may change; test the range with
 *                   TW_ERR_IS_VERDICT() and print them with tw_strerror() /
 *                   tw_strerror_name(). On the wire all of these become
 *                   PROTOCOL_ERROR (or INVALID_ARGUMENT where
 *                   docs/protocol.md says so).
 *
 * Argument errors (a NULL handle, a bad name, options out of range) are
 * TW_EINVAL, never -EINVAL: a negated errno always comes from a failed
 * system call, so its text (strerror) describes what the kernel said. The
 * exceptions are documented per call: -ENOBUFS (a get's buffer is too
 * small) and -ENOTCONN (a call on a connection that already failed).
 *
 * Whether an error closed a client's connection depends on how it arose,
 * not only on the code (TW_EPROTO in a reply to one request leaves the
 * connection usable; sent with request id 0 it closes it): ask the handle
 * with tw_client_is_connected() (include/tensorwire/client.h).
 *
 * tw_strerror() returns a static string for any code; it never fails and the
 * string must not be freed.
 */
#ifndef TENSORWIRE_ERROR_H
#define TENSORWIRE_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TW_BUILDING_LIBRARY)
#define TW_EXTERN __attribute__((visibility("default")))
#else
#define TW_EXTERN
#endif

#define TW_WIRE_ERROR_BASE 1000

/* Wire error codes: the u32 carried by an ERROR message (docs/protocol.md). */
enum tw_wire_error {
    TW_WIRE_NOT_FOUND = 1,
    TW_WIRE_DEVICE_UNAVAILABLE = 2,
    TW_WIRE_PROTOCOL_ERROR = 3,
    TW_WIRE_INVALID_ARGUMENT = 4,
    TW_WIRE_CAPACITY_EXCEEDED = 5,
    TW_WIRE_UNAUTHORIZED = 6,
    TW_WIRE_TIMEOUT = 7,
    TW_WIRE_BUSY = 8,
    TW_WIRE_INTERNAL = 9,
    TW_WIRE_CHECKSUM_MISMATCH = 10,
    TW_WIRE_UNSUPPORTED_VERSION = 11,
    TW_WIRE_SHUTTING_DOWN = 12,
    TW_WIRE_CANCELLED = 13,
    TW_WIRE_ERROR_MAX = 13
};

#define TW_ERR_FROM_WIRE(code) (-(TW_WIRE_ERROR_BASE + (int)(code)))

/* First code of the local verdict range (-1100 .. -1199). */
#define TW_VERDICT_BASE 1100
/* Non-zero when err is a local verdict on the peer's input (see above). */
#define TW_ERR_IS_VERDICT(err) ((err) <= -TW_VERDICT_BASE && (err) > -(TW_VERDICT_BASE + 100))

enum tw_error {
    TW_OK = 0,

    /* Protocol error codes (see enum tw_wire_error). */
    TW_ENOTFOUND = TW_ERR_FROM_WIRE(TW_WIRE_NOT_FOUND),
    TW_EDEVICE = TW_ERR_FROM_WIRE(TW_WIRE_DEVICE_UNAVAILABLE),
    TW_EPROTO = TW_ERR_FROM_WIRE(TW_WIRE_PROTOCOL_ERROR),
    TW_EINVAL = TW_ERR_FROM_WIRE(TW_WIRE_INVALID_ARGUMENT),
    TW_ECAPACITY = TW_ERR_FROM_WIRE(TW_WIRE_CAPACITY_EXCEEDED),
    TW_EUNAUTHORIZED = TW_ERR_FROM_WIRE(TW_WIRE_UNAUTHORIZED),
    TW_ETIMEDOUT = TW_ERR_FROM_WIRE(TW_WIRE_TIMEOUT),
    TW_EBUSY = TW_ERR_FROM_WIRE(TW_WIRE_BUSY),
    TW_EINTERNAL = TW_ERR_FROM_WIRE(TW_WIRE_INTERNAL),
    TW_ECHECKSUM = TW_ERR_FROM_WIRE(TW_WIRE_CHECKSUM_MISMATCH),
    TW_EVERSION = TW_ERR_FROM_WIRE(TW_WIRE_UNSUPPORTED_VERSION),
    TW_ESHUTDOWN = TW_ERR_FROM_WIRE(TW_WIRE_SHUTTING_DOWN),
    TW_ECANCELLED = TW_ERR_FROM_WIRE(TW_WIRE_CANCELLED),
};

/* Static, never-NULL description of any code (positive values too). */
TW_EXTERN const char *tw_strerror(int err);

/* Short symbolic name, e.g. "NOT_FOUND", "EBAD_MAGIC", "ECONNREFUSED". */
TW_EXTERN const char *tw_strerror_name(int err);

#ifdef __cplusplus
}
#endif
#endif
