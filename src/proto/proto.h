/*
 * tensorwire protocol v1: constants, decoded message views, and the codec.
 *
 * The codec does no I/O: bytes in, structs out, and structs in, bytes out.
 * docs/protocol.md is the normative description of every byte; this header
 * mirrors it. All multi-byte integers on the wire are little-endian and are
 * read and written only through the put/get helpers in wire.h.
 *
 * Ownership: decoded messages are *views*. Every pointer in a struct tw_msg
 * (names, device tags, messages, address bytes, DATA bytes, list entries)
 * points into the buffer that was passed to tw__msg_decode() and stays valid
 * exactly as long as that buffer does. The codec allocates nothing.
 */
#ifndef TW_PROTO_H
#define TW_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/verdict.h" /* TW_E* verdicts; includes tensorwire/error.h */

#define TW_PROTO_MAGIC 0x52495754u /* bytes 'T' 'W' 'I' 'R' on the wire */
#define TW_PROTO_VERSION 1
#define TW_FRAME_HEADER_LEN 24

/* Frame header flags (byte 5). */
#define TW_FRAME_MORE                                                                              \
    0x01u /* DATA, LIST_REPLY: more frames of this reply follow;                                   \
           * RDMA_REGISTER (bit 5): its bytes follow */
#define TW_FRAME_FLAGS_KNOWN TW_FRAME_MORE

/* Limits (docs/protocol.md, "Limits"). */
#define TW_PREAUTH_MAX_FRAME 4096u       /* before HELLO(_ACK)/AUTH complete */
#define TW_MIN_MAX_FRAME (64u * 1024u)   /* smallest max_frame a peer may announce */
#define TW_DEFAULT_MAX_FRAME (16u << 20) /* what libtensorwire announces */
#define TW_MAX_MAX_FRAME (1u << 30)      /* largest max_frame a peer may announce */
/* Tensors smaller than this move inline even when both peers have RDMA:
 * below it the extra RDMA_REGISTER / RDMA_READY / RDMA_DONE round trips cost
 * more than the copy through the socket (docs/performance.md, "RDMA size
 * threshold"). Default of tensorwired --rdma-min-bytes and of
 * tw_client_options.rdma_min_bytes; not a protocol limit. */
#define TW_DEFAULT_RDMA_MIN_BYTES (1u << 20)
/* The same over shm, where both sides copy by cross-memory attach: RDMA
 * gets at least as fast as inline from 32 KiB on the H200 host at every
 * depth (1.00-1.07x one at a time, 1.00-1.01x with 16 in flight, 1.56-1.73x
 * with 64), puts 1.39-1.53x with 64 in flight (docs/performance.md, "The
 * shm threshold at 32 KiB"; on the 2-core VM, where the threads outnumber
 * the cores, gets with 16 in flight lose: 0.5-0.84x). Used where no
 * threshold was set (tensorwired without --rdma-min-bytes; the client's
 * TW_RDMA_MIN_BYTES_AUTO for puts in a call that keeps TW_DEEP_PUTS or
 * more in flight). */
#define TW_DEFAULT_RDMA_MIN_BYTES_SHM (32u << 10)
/* A put over shm in a call that keeps fewer than TW_DEEP_PUTS in
 * flight: a 32 KiB RDMA put costs one more control round trip than a get,
 * and ran at 0.87-0.98x inline one at a time, 0.63-0.66x with 8 in flight,
 * 0.82-0.86x with 16 and 0.92-0.96x with 24, against 1.05-1.22x with 32,
 * 1.28-1.43x with 48 (same section; 48 KiB puts 1.09-1.16x one at a
 * time, 0.79-1.12x with 16). */
#define TW_DEFAULT_RDMA_MIN_BYTES_SHM_SHALLOW (64u << 10)
/* A call keeping this many puts in flight or more is deep (above). */
#define TW_DEEP_PUTS 32u
/* A put from GPU memory over a provider other than shm in a deep call: by
 * RDMA from this size, where host memory keeps TW_DEFAULT_RDMA_MIN_BYTES.
 * GPU memory that stages is read out of the client's staging slabs, where
 * a batch's blocks lie side by side whatever their layout on the GPU, so
 * the server reads runs of them with one operation (joined operations);
 * host buffers join only where the caller's do. Over tcp on an H100 host,
 * 40,960 device blocks of 32 KiB put by staged RDMA at 1965-2027 MiB/s
 * against 1414-1573 inline (one call), and at 0.84-0.89 of one device
 * tensor after e62c174 against 0.45-0.50 inline; host memory on the 2-core
 * VM: 32 KiB puts from separate buffers 0.22-0.39x inline with 16 or 64
 * in flight, the KV batch (adjacent) 0.90-1.27x (docs/performance.md,
 * "Device blocks over tcp by RDMA at the default thresholds"). */
#define TW_DEFAULT_RDMA_MIN_BYTES_GPU_DEEP (32u << 10)
/* What tensorwired takes a client's request for RDMA for a put from where
 * no --rdma-min-bytes was set, on every provider: the client knows the
 * put's size, memory and depth, and its own threshold (above) decides;
 * gets, whose size only the server knows, keep the provider's default. */
#define TW_DEFAULT_RDMA_MIN_BYTES_PUT (32u << 10)
/* Over shm GPU memory that stages (not admitted for GPUDirect) follows the
 * host thresholds: it had its own, 512 KiB (a47caf1), until staged RDMA
 * won from 32 KiB on the H200, GPU to GPU: gets 1.0-1.3x inline one by one
 * at 32 KiB, 1.1-2.4x at 128 KiB, device-block batch gets 1.3-3.2x from 32
 * to 256 KiB blocks; puts, once small ones stopped taking the server's
 * pipeline, 1.15-1.6x at 32 KiB and 1.45-1.94x at 128 KiB with 1-64 in
 * flight, device-block batch puts 0.79-0.89 of one tensor against 0.57-0.62
 * inline (docs/performance.md, "Staged gets from 32 KiB", "Small staged
 * puts"). */
#define TW_MAX_NAME_LEN 1024u
#define TW_MAX_NDIM 16u
#define TW_MAX_DEVICE_TAG_LEN 32u
#define TW_MAX_ERROR_MSG_LEN 1024u
#define TW_MAX_AGENT_LEN 64u
#define TW_MAX_PROVIDER_LEN 64u
#define TW_MAX_FABRIC_ADDR_LEN 256u
#define TW_MAX_FABRIC_ENTRIES 8u
#define TW_MAX_REASON_LEN 256u
#define TW_MAX_STATS_KEY_LEN 64u
#define TW_AUTH_NONCE_LEN 32u
#define TW_AUTH_MAC_LEN 32u
#define TW_HOST_ID_LEN 16u
#define TW_PING_PAYLOAD_LEN 8u
#define TW_DATA_PREFIX_LEN 8u /* DATA payload starts with a u64 offset */
#define TW_DESCRIPTOR_FIXED_LEN 24u

/* Message tags (u32). RDMA_REGISTER = 0x0000000C is fixed by ADR-012. */
enum tw_tag {
    TW_TAG_HELLO = 0x01,          /* C->S */
    TW_TAG_HELLO_ACK = 0x02,      /* S->C */
    TW_TAG_AUTH = 0x03,           /* C->S */
    TW_TAG_AUTH_OK = 0x04,        /* S->C */
    TW_TAG_TENSOR_REQUEST = 0x05, /* C->S: client pulls; server is source */
    TW_TAG_TENSOR_PUT = 0x06,     /* C->S: client pushes; server is destination */
    TW_TAG_TENSOR_INFO = 0x07,    /* S->C: reply to TENSOR_REQUEST and STAT */
    TW_TAG_DATA = 0x08,           /* source -> destination, inline bytes */
    TW_TAG_PUT_ACCEPT = 0x09,     /* S->C */
    TW_TAG_RDMA_ENDPOINT = 0x0A,  /* C->S offer, S->C answer */
    TW_TAG_RDMA_DONE = 0x0B,      /* data mover -> other peer */
    TW_TAG_RDMA_REGISTER = 0x0C,  /* Either (ADR-012) */
    TW_TAG_RDMA_READY = 0x0D,     /* destination owner -> source owner */
    TW_TAG_ERROR = 0x0E,          /* Either */
    TW_TAG_OK = 0x0F,             /* S->C */
    TW_TAG_LIST = 0x10,           /* C->S */
    TW_TAG_LIST_REPLY = 0x11,     /* S->C */
    TW_TAG_STAT = 0x12,           /* C->S */
    TW_TAG_DELETE = 0x13,         /* C->S */
    TW_TAG_PING = 0x14,           /* C->S */
    TW_TAG_PONG = 0x15,           /* S->C */
    TW_TAG_GOODBYE = 0x16,        /* Either */
    TW_TAG_STATS = 0x17,          /* C->S */
    TW_TAG_STATS_REPLY = 0x18,    /* S->C */
    TW_TAG_RDMA_AVAILABLE = 0x19, /* source owner -> destination owner (bit 5) */
    TW_TAG_MAX = 0x19
};

/* capability_flags (u64). Bits 8..63 reserved: send 0, ignore on receipt. */
#define TW_CAP_INLINE_DATA (UINT64_C(1) << 0)
#define TW_CAP_PAYLOAD_CRC32C (UINT64_C(1) << 1)
#define TW_CAP_RDMA_DATA_PLANE (UINT64_C(1) << 2)
#define TW_CAP_RDMA_GPUDIRECT (UINT64_C(1) << 3) /* MUST imply bit 2 */
#define TW_CAP_EAGER_PUT (UINT64_C(1) << 4)      /* inline put DATA before PUT_ACCEPT */
/* A source registration may precede its bytes: RDMA_REGISTER with MORE,
 * then RDMA_AVAILABLE frames say how far the region may be read. */
#define TW_CAP_RDMA_PROGRESSIVE (UINT64_C(1) << 5)
/* A put with WANT_RDMA: the client's RDMA_REGISTER may follow its
 * TENSOR_PUT before PUT_ACCEPT (no round trip before the server reads). */
#define TW_CAP_EAGER_RDMA_PUT (UINT64_C(1) << 6)
/* A get may carry ATTACH_READ: over a host-local provider the client reads
 * the source by cross-memory attach, so the server may register nothing
 * (RDMA_REGISTER with rkey 0). Meaningful only with bit 2. */
#define TW_CAP_RDMA_ATTACH_READS (UINT64_C(1) << 7)
#define TW_CAP_KNOWN_MASK (UINT64_C(0xFF))

enum tw_dtype {
    TW_DTYPE_F64 = 1,
    TW_DTYPE_F32 = 2,
    TW_DTYPE_F16 = 3,
    TW_DTYPE_BF16 = 4,
    TW_DTYPE_F8E4M3 = 5,
    TW_DTYPE_F8E5M2 = 6,
    TW_DTYPE_I8 = 7,
    TW_DTYPE_I16 = 8,
    TW_DTYPE_I32 = 9,
    TW_DTYPE_I64 = 10,
    TW_DTYPE_U8 = 11,
    TW_DTYPE_U16 = 12,
    TW_DTYPE_U32 = 13,
    TW_DTYPE_U64 = 14,
    TW_DTYPE_BOOL = 15,
    TW_DTYPE_MAX = 15
};

/* Data plane selector carried by TENSOR_INFO and PUT_ACCEPT. */
enum tw_data_plane {
    TW_DP_NONE = 0,   /* TENSOR_INFO answering STAT: no data follows */
    TW_DP_INLINE = 1, /* DATA frames on this connection */
    TW_DP_RDMA = 2    /* RDMA_REGISTER / RDMA_READY / RDMA_DONE sequence */
};

/* TENSOR_REQUEST and TENSOR_PUT flags. */
#define TW_XFER_WANT_RDMA 0x01u
/* TENSOR_REQUEST only, with WANT_RDMA, after bit 7 was negotiated: the
 * client pulls by cross-memory attach and needs no key (§4.5). */
#define TW_XFER_ATTACH_READ 0x02u
/* Descriptor flags. */
#define TW_DESC_HAS_CRC32C 0x01u
/* HELLO_ACK auth methods. */
enum tw_auth_method { TW_AUTH_NONE = 0, TW_AUTH_HMAC_SHA256 = 1 };
/* RDMA_ENDPOINT status. */
enum tw_endpoint_status { TW_EP_OFFER = 0, TW_EP_ACCEPT = 1, TW_EP_DECLINE = 2 };

struct tw_frame_header {
    uint8_t version;
    uint8_t flags;
    uint32_t tag;
    uint32_t payload_len;
    uint64_t request_id;
};

/* A length-delimited byte string borrowed from the decode buffer. */
struct tw_bytes {
    const uint8_t *ptr;
    uint32_t len;
};

struct tw_descriptor {
    uint8_t dtype;
    uint8_t ndim;
    uint8_t flags;   /* TW_DESC_HAS_CRC32C */
    uint32_t crc32c; /* meaningful only with TW_DESC_HAS_CRC32C */
    uint64_t byte_length;
    uint64_t shape[TW_MAX_NDIM];
    struct tw_bytes name;       /* UTF-8, 1..TW_MAX_NAME_LEN, no NUL */
    struct tw_bytes device_tag; /* "cpu" or "cuda:N", 1..TW_MAX_DEVICE_TAG_LEN */
};

struct tw_fabric_entry {
    struct tw_bytes provider; /* e.g. "tcp;ofi_rxm", "shm", "verbs;ofi_rxm" */
    uint32_t addr_format;     /* libfabric FI_ADDR_* / FI_SOCKADDR_* value */
    struct tw_bytes addr;     /* fi_getname() bytes */
};

struct tw_msg {
    struct tw_frame_header hdr;
    union {
        struct { /* HELLO */
            uint64_t caps;
            uint32_t max_frame;
            uint32_t max_inflight;
            struct tw_bytes agent;
        } hello;
        struct {           /* HELLO_ACK */
            uint64_t caps; /* the negotiated set */
            uint32_t max_frame;
            uint32_t max_inflight;
            uint8_t auth_method;
            uint8_t server_nonce[TW_AUTH_NONCE_LEN];
            struct tw_bytes agent;
        } hello_ack;
        struct { /* AUTH */
            uint8_t client_nonce[TW_AUTH_NONCE_LEN];
            uint8_t mac[TW_AUTH_MAC_LEN];
        } auth;
        struct { /* AUTH_OK */
            uint8_t mac[TW_AUTH_MAC_LEN];
        } auth_ok;
        struct {           /* TENSOR_REQUEST */
            uint8_t flags; /* TW_XFER_WANT_RDMA */
            struct tw_bytes name;
        } tensor_request;
        struct { /* TENSOR_PUT */
            uint8_t flags;
            struct tw_descriptor desc;
        } tensor_put;
        struct { /* TENSOR_INFO */
            uint8_t data_plane;
            struct tw_descriptor desc;
        } tensor_info;
        struct { /* DATA */
            uint64_t offset;
            struct tw_bytes bytes; /* ptr may be NULL: see tw__msg_decode_data_prefix */
        } data;
        struct { /* PUT_ACCEPT */
            uint8_t data_plane;
        } put_accept;
        struct { /* RDMA_ENDPOINT */
            uint8_t status;
            uint8_t host_id[TW_HOST_ID_LEN];
            struct tw_bytes reason;
            uint8_t count;
            struct tw_fabric_entry entries[TW_MAX_FABRIC_ENTRIES];
        } rdma_endpoint;
        struct {             /* RDMA_DONE */
            uint32_t status; /* 0 or a wire error code */
            uint64_t bytes;
        } rdma_done;
        struct { /* RDMA_REGISTER (ADR-012: role-agnostic) */
            uint64_t rkey;
            uint64_t remote_addr;
            uint64_t length;
        } rdma_register;
        struct {            /* RDMA_AVAILABLE (bit 5) */
            uint64_t ready; /* bytes from the region's start that may be read */
        } rdma_available;
        struct { /* ERROR */
            uint32_t code;
            struct tw_bytes message;
        } error;
        struct {                    /* LIST */
            struct tw_bytes prefix; /* may be empty */
        } list;
        struct { /* LIST_REPLY: count descriptors, iterate with tw__list_next */
            uint32_t count;
            struct tw_bytes entries;
        } list_reply;
        struct { /* STAT, DELETE */
            struct tw_bytes name;
        } name;
        struct { /* PING, PONG */
            uint8_t payload[TW_PING_PAYLOAD_LEN];
        } ping;
        struct { /* GOODBYE */
            uint32_t code;
        } goodbye;
        struct { /* STATS_REPLY: count pairs, iterate with tw__stats_next */
            uint32_t count;
            struct tw_bytes entries;
        } stats_reply;
    } u;
};

/* Size in bytes of one element of dtype, 0 for an unknown dtype. */
size_t tw__dtype_size(uint8_t dtype);
/* Lower-case name ("f32", "bf16", "f8e4m3", "bool"), NULL when unknown. */
const char *tw__dtype_name(uint8_t dtype);
/* Inverse of tw__dtype_name; 0 when unknown. */
uint8_t tw__dtype_from_name(const char *name);
/* Message tag name ("RDMA_REGISTER"), "UNKNOWN" otherwise. */
const char *tw__tag_name(uint32_t tag);
/* Whether MORE is legal on tag (DATA, LIST_REPLY, RDMA_REGISTER). */
int tw__tag_may_have_more(uint32_t tag);
/* Largest payload_len a valid frame of this tag can have (docs/protocol.md,
 * "Limits"): e.g. 1212 for TENSOR_PUT. UINT32_MAX for DATA, LIST_REPLY and
 * STATS_REPLY (bounded only by max_frame), 0 for an unknown tag. A reader
 * may refuse a larger frame from its header alone, before buffering it. */
uint32_t tw__max_payload_len(uint32_t tag);

/*
 * Header decoding, step one of the reader's order: frame complete,
 * magic/version, known tag, payload_len <= max_frame, known flag bits.
 * Returns 0 with *hdr filled, TW_EAGAIN_FRAME when fewer than
 * TW_FRAME_HEADER_LEN bytes are available, or the first violation found.
 * Never reads past buf[len-1].
 */
int tw__frame_decode_header(const uint8_t *buf, size_t len, uint32_t max_frame,
                            struct tw_frame_header *hdr);

/*
 * Decodes one whole frame: header checks as above, then TW_EAGAIN_FRAME if the
 * payload is incomplete, then the per-message rules of docs/protocol.md.
 * On success returns the frame's total length (header + payload) and fills
 * *msg with views into buf. On failure *msg is unspecified.
 */
ssize_t tw__msg_decode(const uint8_t *buf, size_t len, uint32_t max_frame, struct tw_msg *msg);

/*
 * Decodes the payload of a frame whose header was already decoded. payload
 * must hold exactly hdr->payload_len bytes. Returns 0 or a violation.
 */
int tw__msg_decode_payload(const struct tw_frame_header *hdr, const uint8_t *payload,
                           struct tw_msg *msg);

/*
 * Zero-copy receive of DATA: given the header and the first
 * TW_DATA_PREFIX_LEN payload bytes, fills msg->u.data.offset and sets
 * msg->u.data.bytes to {NULL, payload_len - 8}. The caller then reads the
 * data bytes straight into their destination.
 */
int tw__msg_decode_data_prefix(const struct tw_frame_header *hdr, const uint8_t *prefix,
                               struct tw_msg *msg);

/*
 * Encoding. The encoders trust nothing: they validate the message by the same
 * per-message rules as the decoder and return its verdict instead of writing
 * an invalid frame.
 *
 * tw__msg_encoded_len: the frame's total length, or a negative verdict.
 * tw__msg_encode: writes the whole frame (header included, hdr.payload_len is
 *   computed, not read) into buf; returns its length, -ENOBUFS when cap is too
 *   small, or a verdict. For DATA, msg->u.data.bytes is copied when its ptr
 *   is non-NULL; with ptr == NULL only the header and offset are written
 *   (TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN bytes) and the caller sends
 *   bytes.len data bytes after them (writev / sendmsg); the return value is
 *   then the number of bytes written (32), not the frame length.
 * The version byte is always TW_PROTO_VERSION; msg->hdr.version is ignored.
 * HELLO / HELLO_ACK caps with reserved bits set are refused (TW_EBAD_CAPS):
 * senders MUST send them as 0 (receivers mask them off).
 */
ssize_t tw__msg_encoded_len(const struct tw_msg *msg);
ssize_t tw__msg_encode(const struct tw_msg *msg, uint8_t *buf, size_t cap);
/* Fills *m as ERROR(code, id) whose message is text (NUL-terminated, kept
 * by reference: it must outlive *m's encoding). */
void tw__msg_error_init(struct tw_msg *m, uint64_t id, uint32_t code, const char *text);
/* The library code (tensorwire/error.h) of a wire error code a peer sent
 * (ERROR's code, RDMA_DONE's status): 1..99 map one to one
 * (TW_ERR_FROM_WIRE), anything else is TW_EINTERNAL. The range check comes
 * first: TW_ERR_FROM_WIRE of an arbitrary u32 overflows an int (the
 * session fuzzer found one in the server's log line for ERROR). */
static inline int tw__err_from_peer(uint32_t code)
{
    return code >= 1 && code < 100 ? TW_ERR_FROM_WIRE(code) : TW_EINTERNAL;
}

/*
 * Descriptor helpers. tw__descriptor_check validates a descriptor by the
 * protocol rules (dtype known, ndim <= TW_MAX_NDIM, product of shape times
 * element size equals byte_length without overflow, name and device tag
 * valid). tw__shape_bytes computes the byte length with overflow detection.
 */
int tw__descriptor_check(const struct tw_descriptor *d);
int tw__shape_bytes(uint8_t dtype, uint8_t ndim, const uint64_t *shape, uint64_t *out_bytes);
/* UTF-8 validity (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
 * Returns 1 when s[0..len) is valid UTF-8 (an empty string is), else 0. */
int tw__utf8_valid(const uint8_t *s, size_t len);
/* Offset of the first byte that does not start a valid RFC 3629 sequence
 * (the sequence is truncated, overlong, a surrogate or above U+10FFFF), or
 * len when all of s is valid. */
size_t tw__utf8_invalid_at(const uint8_t *s, size_t len);
/* Why s[0..len) is not a valid tensor name ("is empty", "is longer than
 * 1024 bytes", "is not valid UTF-8", "holds a control character ..."), a
 * static string; NULL when it is valid. */
const char *tw__name_problem(const uint8_t *s, size_t len);
/* Tensor name rule: 1..TW_MAX_NAME_LEN bytes of valid UTF-8 without
 * control characters (C0 including NUL, DEL, C1). */
int tw__name_check(const uint8_t *s, size_t len);
/* Device tag rule: "cpu" or "cuda:N" (N decimal 0..255, no leading zeros)
 * or another [a-z0-9_:.-]{1,32} tag (syntactically valid, possibly unknown
 * to the receiver: that is DEVICE_UNAVAILABLE, not a protocol error). */
int tw__device_tag_check(const uint8_t *s, size_t len);

/* Explains a request-level verdict (EBAD_NAME, EBAD_DTYPE, EBAD_SHAPE,
 * EOVERFLOW, EBAD_DEVICE_TAG) about the request-opening frame at frame
 * (flen bytes, header included, framing already checked) with the rule and
 * the value that broke it, e.g. "name is 1040 bytes, limit 1024" or "name
 * is not valid UTF-8 at byte offset 7". Pure: no I/O. Writes a
 * NUL-terminated text (possibly cut) into buf; returns buf. */
const char *tw__explain_request_verdict(const uint8_t *frame, size_t flen, int verdict, char *buf,
                                        size_t len);

/* Iterators over LIST_REPLY and STATS_REPLY entries. *cursor starts at 0.
 * Return 1 with the next entry, 0 at the end, or a violation. */
int tw__list_next(const struct tw_msg *msg, size_t *cursor, struct tw_descriptor *out);
int tw__stats_next(const struct tw_msg *msg, size_t *cursor, struct tw_bytes *key, uint64_t *value);
/* Encoded size of one descriptor; to pack LIST_REPLY/STATS_REPLY bodies. */
/* Writes a descriptor already validated (tw__descriptor_check) into buf,
 * which must hold tw__descriptor_encoded_len(d) bytes; returns that length.
 * The one place that knows the descriptor's byte layout. */
size_t tw__descriptor_put(uint8_t *buf, const struct tw_descriptor *d);
size_t tw__descriptor_encoded_len(const struct tw_descriptor *d);
/* Appends one descriptor / stats pair at buf; returns bytes written,
 * -ENOBUFS, or the verdict of the descriptor / key rules (an invalid entry
 * is never written). Callers build list_reply.entries / stats_reply.entries
 * with these; LIST_REPLY entries must be sorted by name, bytewise, unique. */
ssize_t tw__descriptor_encode(const struct tw_descriptor *d, uint8_t *buf, size_t cap);
ssize_t tw__stats_entry_encode(const char *key, uint64_t value, uint8_t *buf, size_t cap);

/* CRC32C (Castagnoli), as carried in descriptors with TW_DESC_HAS_CRC32C.
 * crc starts at 0; tw__crc32c(tw__crc32c(0, a, n), b, m) == crc of a||b. */
uint32_t tw__crc32c(uint32_t crc, const void *buf, size_t len);

/* 1 when a and b are the same message: header fields and every payload
 * field equal, byte strings compared by content (not by pointer). */
int tw__msg_equal(const struct tw_msg *a, const struct tw_msg *b);

#endif
