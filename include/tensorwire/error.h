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
 *   -1100 .. -1199  a local decoder or state-machine verdict (malformed or
 *                   out-of-order input). On the wire all of these become
 *                   PROTOCOL_ERROR (or INVALID_ARGUMENT where docs/protocol.md
 *                   says so).
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

    /* Decoder verdicts, in the order the decoder checks (docs/protocol.md). */
    TW_EAGAIN_FRAME = -1100, /* not an error: frame incomplete, read more */
    TW_EBAD_MAGIC = -1101,
    TW_EBAD_VERSION = -1102,
    TW_EUNKNOWN_TAG = -1103,
    TW_EFRAME_TOO_LARGE = -1104, /* payload_len above the negotiated limit */
    TW_EBAD_FLAGS = -1105,       /* reserved header/payload flag bits set */
    TW_EBAD_LENGTH = -1106,      /* payload length inconsistent with fields */
    TW_EBAD_NAME = -1107,        /* empty, too long, NUL or not UTF-8 */
    TW_EBAD_DTYPE = -1108,
    TW_EBAD_SHAPE = -1109, /* ndim too large or byte_length mismatch */
    TW_EOVERFLOW = -1110,  /* shape product overflows 64 bits */
    TW_EBAD_DEVICE_TAG = -1111,
    TW_EBAD_CAPS = -1112,        /* RDMA_GPUDIRECT without RDMA_DATA_PLANE */
    TW_EBAD_FIELD = -1113,       /* a field outside its allowed values */
    TW_EBAD_DIRECTION = -1114,   /* a message this role must never receive */
    TW_EOUT_OF_ORDER = -1115,    /* valid message, wrong point in sequence */
    TW_EUNKNOWN_REQUEST = -1116, /* request id not in flight */
    TW_EDUP_REQUEST = -1117,     /* request id already in flight */
    TW_ETOO_MANY_INFLIGHT = -1118,
    TW_ENOT_NEGOTIATED = -1119, /* feature used without its capability */
    TW_EBAD_REQUEST_ID = -1120, /* zero where non-zero required, or v.v. */
    TW_ENOFABRIC = -1121,       /* no usable RDMA data plane */
};

/* Static, never-NULL description of any code (positive values too). */
TW_EXTERN const char *tw_strerror(int err);

/* Short symbolic name, e.g. "NOT_FOUND", "EBAD_MAGIC", "ECONNREFUSED". */
TW_EXTERN const char *tw_strerror_name(int err);

#ifdef __cplusplus
}
#endif
#endif
