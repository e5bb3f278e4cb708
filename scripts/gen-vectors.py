#!/usr/bin/env python3
"""Writes the protocol v1 golden vectors (tests/vectors/*.hex) and the fuzz
seed corpora (fuzz/corpus/<target>/) from an independent, field-by-field
description of every message in docs/protocol.md.

This script does not use the C codec: tests/unit/test_vectors.c builds the
same messages in C and compares the encoder's bytes with these files, so the
spec, this script and the C code have to agree for the test to pass.

Vector file format: lines starting with '#' are comments (here: one per
field, offset and meaning); every other line holds hex bytes; whitespace is
ignored.

Usage: scripts/gen-vectors.py [--check]   (run from the repository root)
"""
import hashlib
import hmac
import os
import struct
import sys

MAGIC = b"TWIR"
TAGS = {
    "HELLO": 0x01, "HELLO_ACK": 0x02, "AUTH": 0x03, "AUTH_OK": 0x04,
    "TENSOR_REQUEST": 0x05, "TENSOR_PUT": 0x06, "TENSOR_INFO": 0x07, "DATA": 0x08,
    "PUT_ACCEPT": 0x09, "RDMA_ENDPOINT": 0x0A, "RDMA_DONE": 0x0B, "RDMA_REGISTER": 0x0C,
    "RDMA_READY": 0x0D, "ERROR": 0x0E, "OK": 0x0F, "LIST": 0x10, "LIST_REPLY": 0x11,
    "STAT": 0x12, "DELETE": 0x13, "PING": 0x14, "PONG": 0x15, "GOODBYE": 0x16,
    "STATS": 0x17, "STATS_REPLY": 0x18, "RDMA_AVAILABLE": 0x19,
}


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def u8(v): return struct.pack("<B", v)
def u16(v): return struct.pack("<H", v)
def u32(v): return struct.pack("<I", v)
def u64(v): return struct.pack("<Q", v)


class Fields:
    """An ordered list of (comment, bytes), offsets computed on output."""

    def __init__(self):
        self.items = []

    def add(self, comment, data):
        self.items.append((comment, data))
        return self

    def extend(self, other, prefix=""):
        for c, d in other.items:
            self.items.append((prefix + c, d))
        return self

    def bytes(self):
        return b"".join(d for _, d in self.items)


def descriptor(dtype, shape, name, tag, byte_length, crc=None):
    f = Fields()
    f.add(f"dtype u8 = {dtype}", u8(dtype))
    f.add(f"ndim u8 = {len(shape)}", u8(len(shape)))
    f.add(f"flags u8 = {1 if crc is not None else 0} (bit0 HAS_CRC32C)", u8(1 if crc is not None else 0))
    f.add(f"device_tag_len u8 = {len(tag)}", u8(len(tag)))
    f.add(f"name_len u16 = {len(name)}", u16(len(name)))
    f.add("reserved u16 = 0", u16(0))
    f.add(f"byte_length u64 = {byte_length}", u64(byte_length))
    f.add(f"crc32c u32 = 0x{(crc or 0):08x}", u32(crc or 0))
    f.add("reserved u32 = 0", u32(0))
    for i, d in enumerate(shape):
        f.add(f"shape[{i}] u64 = {d}", u64(d))
    f.add(f"name = \"{name.decode()}\"", name)
    f.add(f"device_tag = \"{tag.decode()}\"", tag)
    return f


def frame(tag, request_id, payload, flags=0):
    p = payload.bytes()
    f = Fields()
    f.add("header: magic 'T' 'W' 'I' 'R' (u32 0x52495754)", MAGIC)
    f.add("header: version u8 = 1", u8(1))
    f.add(f"header: flags u8 = 0x{flags:02x}" + (" (MORE)" if flags & 1 else ""), u8(flags))
    f.add("header: reserved u16 = 0", u16(0))
    f.add(f"header: tag u32 = 0x{TAGS[tag]:02x} ({tag})", u32(TAGS[tag]))
    f.add(f"header: payload_len u32 = {len(p)}", u32(len(p)))
    f.add(f"header: request_id u64 = {request_id}", u64(request_id))
    f.extend(payload, "payload: ")
    return f


TENSOR = bytes(range(24))  # the 24 bytes of f32[2,3] used by DATA vectors
TENSOR_CRC = crc32c(TENSOR)
NAME = b"layer0.weight"
NONCE_S = bytes(range(0xA0, 0xC0))
NONCE_C = bytes(range(0x40, 0x60))
# Authentication example: the token is the token file's contents with
# trailing whitespace stripped. The MACs below are real HMAC-SHA256 values.
TOKEN = b"correct horse battery staple"
MAC_C = hmac.new(TOKEN, b"tensorwire-v1 client" + NONCE_S + NONCE_C, hashlib.sha256).digest()
MAC_S = hmac.new(TOKEN, b"tensorwire-v1 server" + NONCE_C + NONCE_S, hashlib.sha256).digest()
HOST_ID = bytes(range(0x10, 0x20))
ADDR_A = bytes([0x02, 0x00, 0x4E, 0x21, 127, 0, 0, 1]) + bytes(8)
ADDR_B = bytes([0x02, 0x00, 0x4E, 0x22, 127, 0, 0, 1]) + bytes(8)


def p(*pairs):
    f = Fields()
    for c, d in pairs:
        f.add(c, d)
    return f


def fabric_entry(provider, fmt, addr):
    return [
        (f"entry provider_len u8 = {len(provider)}", u8(len(provider))),
        ("entry reserved u8 = 0", u8(0)),
        (f"entry addr_len u16 = {len(addr)}", u16(len(addr))),
        (f"entry addr_format u32 = {fmt} (FI_SOCKADDR_IN)", u32(fmt)),
        (f"entry provider = \"{provider.decode()}\"", provider),
        ("entry addr = struct sockaddr_in 127.0.0.1 port", addr),
    ]


def vectors():
    v = {}
    agent_c = b"tensorwire/0.1.0"
    agent_s = b"tensorwired/0.1.0"
    v["hello"] = frame("HELLO", 0, p(
        ("caps u64 = 0xf (INLINE_DATA|PAYLOAD_CRC32C|RDMA_DATA_PLANE|RDMA_GPUDIRECT)", u64(0xF)),
        ("max_frame u32 = 16777216 (16 MiB)", u32(16 << 20)),
        ("max_inflight u32 = 256", u32(256)),
        (f"agent_len u16 = {len(agent_c)}", u16(len(agent_c))),
        (f"agent = \"{agent_c.decode()}\"", agent_c)))
    v["hello_ack"] = frame("HELLO_ACK", 0, p(
        ("caps u64 = 0x7 (negotiated: INLINE_DATA|PAYLOAD_CRC32C|RDMA_DATA_PLANE)", u64(0x7)),
        ("max_frame u32 = 4194304 (min of both)", u32(4 << 20)),
        ("max_inflight u32 = 64 (min of both)", u32(64)),
        ("auth_method u8 = 1 (HMAC-SHA256)", u8(1)),
        ("reserved u8[3] = 0", bytes(3)),
        ("server_nonce [32] = a0 a1 .. bf", NONCE_S),
        (f"agent_len u16 = {len(agent_s)}", u16(len(agent_s))),
        (f"agent = \"{agent_s.decode()}\"", agent_s)))
    v["auth"] = frame("AUTH", 0, p(
        ("client_nonce [32] = 40 41 .. 5f", NONCE_C),
        ("mac [32] = HMAC-SHA256(\"correct horse battery staple\", \"tensorwire-v1 client\" || server_nonce a0..bf || client_nonce 40..5f)", MAC_C)))
    v["auth_ok"] = frame("AUTH_OK", 0, p(
        ("mac [32] = HMAC-SHA256(\"correct horse battery staple\", \"tensorwire-v1 server\" || client_nonce 40..5f || server_nonce a0..bf)", MAC_S)))
    v["tensor_request"] = frame("TENSOR_REQUEST", 1, p(
        ("flags u8 = 1 (WANT_RDMA)", u8(1)),
        ("reserved u8 = 0", u8(0)),
        (f"name_len u16 = {len(NAME)}", u16(len(NAME))),
        (f"name = \"{NAME.decode()}\"", NAME)))
    put = Fields().add("flags u8 = 0", u8(0)).add("reserved u8[3] = 0", bytes(3))
    put.extend(descriptor(2, [2, 3], NAME, b"cuda:0", 24, TENSOR_CRC), "descriptor ")
    v["tensor_put"] = frame("TENSOR_PUT", 2, put)
    info = Fields().add("data_plane u8 = 1 (inline)", u8(1)).add("reserved u8[3] = 0", bytes(3))
    info.extend(descriptor(2, [2, 3], NAME, b"cpu", 24), "descriptor ")
    v["tensor_info"] = frame("TENSOR_INFO", 1, info)
    v["data"] = frame("DATA", 1, p(
        ("offset u64 = 0", u64(0)),
        ("bytes [24] = 00 01 .. 17", TENSOR)))
    # The first of two frames of the same 24-byte tensor: MORE set, bytes
    # left for the last frame (section 4.8: a frame with MORE never ends at
    # byte_length).
    v["data_more"] = frame("DATA", 1, p(
        ("offset u64 = 0", u64(0)),
        ("bytes [16] = 00 01 .. 0f", TENSOR[:16])), flags=1)
    v["put_accept"] = frame("PUT_ACCEPT", 2, p(
        ("data_plane u8 = 2 (rdma)", u8(2)),
        ("reserved u8[3] = 0", bytes(3))))
    offer = [("status u8 = 0 (OFFER)", u8(0)), ("count u8 = 2", u8(2)),
             ("reason_len u16 = 0", u16(0)), ("host_id [16] = 10 11 .. 1f", HOST_ID),
             ("reason = (empty)", b"")]
    offer += fabric_entry(b"verbs;ofi_rxm", 2, ADDR_A) + fabric_entry(b"tcp;ofi_rxm", 2, ADDR_A)
    v["rdma_endpoint_offer"] = frame("RDMA_ENDPOINT", 0, p(*offer))
    accept = [("status u8 = 1 (ACCEPT)", u8(1)), ("count u8 = 1", u8(1)),
              ("reason_len u16 = 0", u16(0)), ("host_id [16] = 10 11 .. 1f", HOST_ID),
              ("reason = (empty)", b"")]
    accept += fabric_entry(b"tcp;ofi_rxm", 2, ADDR_B)
    v["rdma_endpoint_accept"] = frame("RDMA_ENDPOINT", 0, p(*accept))
    reason = b"no common provider"
    v["rdma_endpoint_decline"] = frame("RDMA_ENDPOINT", 0, p(
        ("status u8 = 2 (DECLINE)", u8(2)), ("count u8 = 0", u8(0)),
        (f"reason_len u16 = {len(reason)}", u16(len(reason))),
        ("host_id [16] = 10 11 .. 1f", HOST_ID),
        (f"reason = \"{reason.decode()}\"", reason)))
    v["rdma_done"] = frame("RDMA_DONE", 4, p(
        ("status u32 = 0 (success)", u32(0)), ("reserved u32 = 0", u32(0)),
        ("bytes u64 = 24", u64(24))))
    v["rdma_register"] = frame("RDMA_REGISTER", 4, p(
        ("rkey u64 = 0x1234", u64(0x1234)),
        ("remote_addr u64 = 0x7f0000001000 (FI_MR_VIRT_ADDR)", u64(0x7F0000001000)),
        ("length u64 = 24 (== descriptor byte_length)", u64(24))))
    v["rdma_register_more"] = frame("RDMA_REGISTER", 4, p(
        ("rkey u64 = 0x1234", u64(0x1234)),
        ("remote_addr u64 = 0x7f0000001000 (FI_MR_VIRT_ADDR)", u64(0x7F0000001000)),
        ("length u64 = 24 (== descriptor byte_length); MORE: readable as RDMA_AVAILABLE says",
         u64(24))), flags=1)
    v["rdma_available"] = frame("RDMA_AVAILABLE", 4, p(
        ("ready u64 = 16 (bytes 0..15 may be read)", u64(16))))
    v["rdma_ready"] = frame("RDMA_READY", 4, p())
    msg = b"no tensor named \"x\""
    v["error"] = frame("ERROR", 5, p(
        ("code u32 = 1 (NOT_FOUND)", u32(1)),
        (f"msg_len u16 = {len(msg)}", u16(len(msg))),
        ("message (UTF-8)", msg)))
    msg0 = b"bad magic"
    v["error_fatal"] = frame("ERROR", 0, p(
        ("code u32 = 3 (PROTOCOL_ERROR)", u32(3)),
        (f"msg_len u16 = {len(msg0)}", u16(len(msg0))),
        ("message (UTF-8)", msg0)))
    v["ok"] = frame("OK", 6, p())
    v["list"] = frame("LIST", 7, p(("prefix_len u16 = 5", u16(5)), ("prefix = \"layer\"", b"layer")))
    lr = Fields().add("count u32 = 2", u32(2))
    lr.extend(descriptor(2, [2, 3], b"layer0.weight", b"cpu", 24), "entry 0 ")
    lr.extend(descriptor(4, [3], b"layer1.bias", b"cuda:1", 6), "entry 1 ")
    v["list_reply"] = frame("LIST_REPLY", 7, lr, flags=1)
    v["stat"] = frame("STAT", 8, p((f"name_len u16 = {len(NAME)}", u16(len(NAME))),
                                   (f"name = \"{NAME.decode()}\"", NAME)))
    v["delete"] = frame("DELETE", 9, p((f"name_len u16 = {len(NAME)}", u16(len(NAME))),
                                       (f"name = \"{NAME.decode()}\"", NAME)))
    v["ping"] = frame("PING", 10, p(("payload [8] = \"pingpong\"", b"pingpong")))
    v["pong"] = frame("PONG", 10, p(("payload [8] = \"pingpong\" (echoed)", b"pingpong")))
    v["goodbye"] = frame("GOODBYE", 0, p(("code u32 = 12 (SHUTTING_DOWN)", u32(12))))
    v["stats"] = frame("STATS", 11, p())
    v["stats_reply"] = frame("STATS_REPLY", 11, p(
        ("count u32 = 2", u32(2)),
        ("key_len u8 = 10", u8(10)), ("key = \"bytes_sent\"", b"bytes_sent"),
        ("value u64 = 1234", u64(1234)),
        ("key_len u8 = 11", u8(11)), ("key = \"conn.active\"", b"conn.active"),
        ("value u64 = 3", u64(3))))
    return v


def render(name, f):
    out = [f"# tensorwire protocol v1 golden vector: {name}",
           "# Format: '#' lines are comments; other lines are hex bytes; whitespace is ignored.",
           f"# Total {len(f.bytes())} bytes. Generated by scripts/gen-vectors.py; see docs/protocol.md."]
    off = 0
    for comment, data in f.items:
        out.append(f"# [{off}] {comment}")
        if data:
            for i in range(0, len(data), 16):
                out.append(" ".join(f"{b:02x}" for b in data[i:i + 16]))
        off += len(data)
    return "\n".join(out) + "\n"


# fuzz_sm input: records of dir u8 | len u16 LE | frame bytes. dir bit0: 1 =
# client to server, 0 = server to client; bit1: deliver even when the
# sender's state machine refuses to send it (tests the receiver alone).
def sm_record(from_client, fr):
    b = fr.bytes()
    return u8(1 if from_client else 0) + u16(len(b)) + b


def sm_sequences(v):
    hello = frame("HELLO", 0, p(("", u64(0xF)), ("", u32(1 << 20)), ("", u32(4)),
                                ("", u16(1)), ("", b"c")))

    def ack(caps, auth):
        return frame("HELLO_ACK", 0, p(("", u64(caps)), ("", u32(1 << 20)), ("", u32(4)),
                                       ("", u8(auth)), ("", bytes(3)),
                                       ("", NONCE_S if auth else bytes(32)), ("", u16(1)), ("", b"s")))

    def info(rid, dp):
        f = Fields().add("", u8(dp)).add("", bytes(3))
        return frame("TENSOR_INFO", rid, f.extend(descriptor(2, [2, 3], NAME, b"cpu", 24)))

    def putm(rid, flags):
        f = Fields().add("", u8(flags)).add("", bytes(3))
        return frame("TENSOR_PUT", rid, f.extend(descriptor(2, [2, 3], NAME, b"cuda:0", 24, TENSOR_CRC)))

    def req(rid, flags):
        return frame("TENSOR_REQUEST", rid, p(("", u8(flags)), ("", u8(0)), ("", u16(len(NAME))), ("", NAME)))

    def data(rid, off, chunk, more):
        return frame("DATA", rid, p(("", u64(off)), ("", chunk)), flags=1 if more else 0)

    def reg(rid):
        return frame("RDMA_REGISTER", rid, p(("", u64(7)), ("", u64(0)), ("", u64(24))))

    def reg_nokey(rid):  # bit 7: a host source of a get asked with ATTACH_READ
        return frame("RDMA_REGISTER", rid, p(("", u64(0)), ("", u64(0x7F0000001000)), ("", u64(24))))

    def reg_more(rid):
        return frame("RDMA_REGISTER", rid, p(("", u64(7)), ("", u64(0)), ("", u64(24))), flags=1)

    def avail(rid, n):
        return frame("RDMA_AVAILABLE", rid, p(("", u64(n))))

    def simple(tag, rid):
        return frame(tag, rid, p())

    def done(rid):
        return frame("RDMA_DONE", rid, p(("", u32(0)), ("", u32(0)), ("", u64(24))))

    hs = [(1, hello), (0, ack(0xF, 1)), (1, v["auth"]), (0, v["auth_ok"])]
    hello_eager = frame("HELLO", 0, p(("", u64(0x1F)), ("", u32(1 << 20)), ("", u32(4)),
                                      ("", u16(1)), ("", b"c")))
    hello_prog = frame("HELLO", 0, p(("", u64(0x2F)), ("", u32(1 << 20)), ("", u32(4)),
                                     ("", u16(1)), ("", b"c")))
    hello_eager_rdma = frame("HELLO", 0, p(("", u64(0x47)), ("", u32(1 << 20)), ("", u32(4)),
                                           ("", u16(1)), ("", b"c")))
    hello_attach = frame("HELLO", 0, p(("", u64(0x87)), ("", u32(1 << 20)), ("", u32(4)),
                                       ("", u16(1)), ("", b"c")))
    accept_inline = frame("PUT_ACCEPT", 1, p(("", u8(1)), ("", bytes(3))))
    ep = [(1, v["rdma_endpoint_offer"]), (0, v["rdma_endpoint_accept"])]
    seqs = {
        "inline_get": hs + [(1, req(1, 0)), (0, info(1, 1)), (0, data(1, 0, TENSOR[:16], 1)),
                            (0, data(1, 16, TENSOR[16:], 0))],
        "inline_put": hs + [(1, putm(1, 0)), (0, frame("PUT_ACCEPT", 1, p(("", u8(1)), ("", bytes(3))))),
                            (1, data(1, 0, TENSOR, 0)), (0, simple("OK", 1))],
        "pull_get": hs + ep + [(1, req(1, 1)), (0, info(1, 2)), (0, reg(1)), (1, simple("RDMA_READY", 1)),
                               (1, done(1))],
        "push_get": hs + ep + [(1, req(1, 1)), (0, info(1, 2)), (0, reg(1)), (1, reg(1)),
                               (1, simple("RDMA_READY", 1)), (0, done(1))],
        "pull_put": hs + ep + [(1, putm(1, 1)), (0, frame("PUT_ACCEPT", 1, p(("", u8(2)), ("", bytes(3))))),
                               (1, reg(1)), (0, simple("RDMA_READY", 1)), (0, done(1)), (0, simple("OK", 1))],
        "push_put": hs + ep + [(1, putm(1, 1)), (0, frame("PUT_ACCEPT", 1, p(("", u8(2)), ("", bytes(3))))),
                               (1, reg(1)), (0, reg(1)), (0, simple("RDMA_READY", 1)), (1, done(1)),
                               (0, simple("OK", 1))],
        # bit 5 (RDMA_PROGRESSIVE): the source registers before its bytes
        # are in place and announces them; pull and push.
        "progressive_get": [(1, hello_prog), (0, ack(0x2F, 0))] + ep
        + [(1, req(1, 1)), (0, info(1, 2)), (0, reg_more(1)), (1, simple("RDMA_READY", 1)),
           (0, avail(1, 8)), (0, avail(1, 24)), (1, done(1)),
           (1, req(2, 1)), (0, info(2, 2)), (0, reg_more(2)), (0, avail(2, 16)), (1, reg(2)),
           (1, simple("RDMA_READY", 2)), (0, avail(2, 24)), (0, done(2))],
        # bit 7 (RDMA_ATTACH_READS): a get asked with ATTACH_READ, its
        # source sent without a key, pulled; then one answered inline.
        "attach_read_get": [(1, hello_attach), (0, ack(0x87, 0))] + ep
        + [(1, req(1, 3)), (0, info(1, 2)), (0, reg_nokey(1)), (1, simple("RDMA_READY", 1)),
           (1, done(1)), (1, req(2, 3)), (0, info(2, 1)), (0, data(2, 0, TENSOR, 0))],
        "misc": hs + [(1, frame("LIST", 2, p(("", u16(0)), ("", b"")))), (0, frame("LIST_REPLY", 2, p(("", u32(0)))))]
        + [(1, frame("PING", 3, p(("", b"pingpong")))), (0, frame("PONG", 3, p(("", b"pingpong")))),
           (1, frame("STATS", 4, p())), (0, frame("STATS_REPLY", 4, p(("", u32(0))))),
           (1, frame("DELETE", 5, p(("", u16(len(NAME))), ("", NAME)))),
           (0, frame("ERROR", 5, p(("", u32(1)), ("", u16(0)), ("", b"")))),
           (1, frame("GOODBYE", 0, p(("", u32(0)))))],
        # bit 4 (EAGER_PUT): DATA before PUT_ACCEPT, PUT_ACCEPT mid-stream,
        # then an eager put refused with its DATA stale.
        "eager_put": [(1, hello_eager), (0, ack(0x13, 0)), (1, putm(1, 0)),
                      (1, data(1, 0, TENSOR[:16], 1)), (0, accept_inline),
                      (1, data(1, 16, TENSOR[16:], 0)), (0, simple("OK", 1)),
                      (1, putm(2, 0)), (1, data(2, 0, TENSOR, 0)),
                      (0, frame("ERROR", 2, p(("", u32(5)), ("", u16(0)), ("", b"")))),
                      (1, putm(3, 0)), (1, data(3, 0, TENSOR, 0)),
                      (0, frame("PUT_ACCEPT", 3, p(("", u8(1)), ("", bytes(3))))),
                      (0, simple("OK", 3))],
        # bit 6 (EAGER_RDMA_PUT): a put's RDMA_REGISTER before PUT_ACCEPT,
        # answered with the RDMA plane, then inline (void), then refused.
        "eager_rdma_put": [(1, hello_eager_rdma), (0, ack(0x47, 0))] + ep
        + [(1, putm(1, 1)), (1, reg(1)), (0, frame("PUT_ACCEPT", 1, p(("", u8(2)), ("", bytes(3))))),
           (0, simple("RDMA_READY", 1)), (0, done(1)), (0, simple("OK", 1)),
           (1, putm(2, 1)), (1, reg(2)), (0, frame("PUT_ACCEPT", 2, p(("", u8(1)), ("", bytes(3))))),
           (1, data(2, 0, TENSOR, 0)), (0, simple("OK", 2)),
           (1, putm(3, 1)), (1, reg(3)),
           (0, frame("ERROR", 3, p(("", u32(5)), ("", u16(0)), ("", b""))))],
        "noauth_error": [(1, hello), (0, ack(0x1, 0)), (1, req(1, 0)), (1, req(2, 0)),
                         (0, frame("ERROR", 1, p(("", u32(1)), ("", u16(0)), ("", b"")))),
                         (0, info(2, 1)), (1, frame("ERROR", 2, p(("", u32(13)), ("", u16(0)), ("", b"")))),
                         (0, data(2, 0, TENSOR, 0))],
    }
    return {k: b"".join(sm_record(d, f) for d, f in s) for k, s in seqs.items()}


def main():
    check = "--check" in sys.argv
    v = vectors()
    files = {}
    for name, f in v.items():
        files[os.path.join("tests", "vectors", name + ".hex")] = render(name, f).encode()
        for target in ("fuzz_frame", "fuzz_roundtrip"):
            files[os.path.join("fuzz", "corpus", target, name)] = f.bytes()
    for name, b in sm_sequences(v).items():
        files[os.path.join("fuzz", "corpus", "fuzz_sm", name)] = b
    stale = []
    for path, data in sorted(files.items()):
        if check:
            try:
                with open(path, "rb") as fh:
                    if fh.read() != data:
                        stale.append(path)
            except FileNotFoundError:
                stale.append(path)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
    if stale:
        print("out of date:", *stale, sep="\n  ")
        return 1
    print(f"{'checked' if check else 'wrote'} {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
