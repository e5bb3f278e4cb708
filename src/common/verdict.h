/*
 * Local verdicts on a peer's input (-1100 .. -1199, include/tensorwire/
 * error.h): what the decoder and the connection state machine return, and
 * the fabric's "no usable data plane". Internal: the public header only
 * promises the range (TW_ERR_IS_VERDICT) and their names through
 * tw_strerror_name(), so codes can be added or split without an API change.
 * src/common/error.c holds the name and text of each.
 */
#ifndef TW_COMMON_VERDICT_H
#define TW_COMMON_VERDICT_H

#include "tensorwire/error.h"

enum tw_verdict {
    /* Decoder verdicts, in the order the decoder checks (docs/protocol.md). */
    TW_EAGAIN_FRAME = -TW_VERDICT_BASE, /* not an error: frame incomplete, read more */
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

#endif
