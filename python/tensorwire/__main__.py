"""python -m tensorwire: the CLI's everyday commands from Python.

    python -m tensorwire [-s HOST:PORT] [--token-file F] [--timeout S] [--fabric P] COMMAND
      ls [PREFIX]              one line per tensor: name, dtype, shape, bytes, device
      stat NAME
      put NAME FILE            FILE.npy: one tensor (bf16/f8 files, '|V2'/'|V1', need --dtype)
                               FILE.safetensors: every tensor T of the file as NAME/T
                               other files: raw bytes with --dtype and --shape
      get NAME FILE            FILE.npy: one tensor (bf16 as '|V2', f8 as '|V1', like the CLI)
                               FILE.safetensors: every tensor under NAME/ into one file
      rm NAME...
      ping
      stats

Exit status: 0 success, 1 the operation failed ("tensorwire: get w0:
NOT_FOUND: ..."), 2 usage error. The server defaults to $TENSORWIRE_SERVER.
"""
import argparse
import json
import mmap
import os
import struct
import sys

import tensorwire

# safetensors dtype names <-> tensorwire dtype names.
_ST_TO_TW = {
    "F64": "f64", "F32": "f32", "F16": "f16", "BF16": "bf16", "F8_E4M3": "f8e4m3",
    "F8_E5M2": "f8e5m2", "I8": "i8", "I16": "i16", "I32": "i32", "I64": "i64", "U8": "u8",
    "U16": "u16", "U32": "u32", "U64": "u64", "BOOL": "bool",
}
_TW_TO_ST = {v: k for k, v in _ST_TO_TW.items()}


class _Failed(Exception):
    """A command failed with a message for stderr (exit 1)."""


def _shape_text(shape):
    return "(" + ",".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _parse_shape(text):
    if text in ("", "scalar"):
        return ()
    try:
        return tuple(int(d) for d in text.split(","))
    except ValueError:
        raise _Failed("bad --shape %r (want e.g. 2,3,4)" % text) from None


def _read_safetensors_header(f, size):
    """(header dict, data start) of an open .safetensors file."""
    raw = f.read(8)
    if len(raw) != 8:
        raise _Failed("not a .safetensors file (shorter than 8 bytes)")
    (n,) = struct.unpack("<Q", raw)
    if n > 100 * 1024 * 1024 or 8 + n > size:
        raise _Failed("not a .safetensors file (header length %d)" % n)
    try:
        header = json.loads(f.read(n).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _Failed("bad .safetensors header: %s" % e) from None
    if not isinstance(header, dict):
        raise _Failed("bad .safetensors header: not a JSON object")
    return header, 8 + n


def _put_safetensors(tw, prefix, path):
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        header, start = _read_safetensors_header(f, size)
        entries = sorted((k, v) for k, v in header.items() if k != "__metadata__")
        if not entries:
            return 0
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        view = memoryview(mm)
        try:
            for name, e in entries:
                try:
                    dt = _ST_TO_TW[e["dtype"]]
                    shape = tuple(int(d) for d in e["shape"])
                    lo, hi = (int(x) for x in e["data_offsets"])
                except (KeyError, TypeError, ValueError):
                    raise _Failed("bad .safetensors entry %r: %r" % (name, e)) from None
                if not 0 <= lo <= hi <= size - start:
                    raise _Failed("bad .safetensors entry %r: offsets outside the file" % name)
                # One put per tensor, each straight from the file's mapping.
                tw.put(prefix + "/" + name, view[start + lo:start + hi], dtype=dt, shape=shape)
        finally:
            view.release()
            if mm is not None:
                mm.close()
    return len(entries)


def _get_safetensors(tw, prefix, path):
    infos = tw.ls(prefix + "/")
    if not infos:
        raise _Failed("no tensor named %s/*" % prefix)
    header, off = {}, 0
    for t in infos:
        header[t.name[len(prefix) + 1:]] = {
            "dtype": _TW_TO_ST[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + t.nbytes]}
        off += t.nbytes
    hdr = json.dumps(header, separators=(",", ":")).encode()
    hdr += b" " * (-len(hdr) % 8)  # the data starts 8-byte aligned
    start = 8 + len(hdr)
    with open(path, "w+b") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr)
        f.truncate(start + off)
        if off == 0:
            return len(infos)
        # Received straight into the file's pages, one batch.
        mm = mmap.mmap(f.fileno(), start + off)
        view = memoryview(mm)
        try:
            outs = [view[start + h["data_offsets"][0]:start + h["data_offsets"][1]] for h in header.values()]
            tw.get_many([t.name for t in infos], out=outs)
            for o in outs:
                o.release()
        finally:
            view.release()
            mm.close()
    return len(infos)


def _put_npy(tw, name, path, dtype):
    import numpy as np

    a = np.load(path, mmap_mode="r", allow_pickle=False)
    if a.dtype.kind == "V":
        if dtype is None:
            raise _Failed("%s holds raw void elements (%s): say which dtype with --dtype" % (path, a.dtype.str))
        a = a.view(np.uint8).reshape(a.shape + (a.dtype.itemsize,))
        tw.put(name, np.ascontiguousarray(a), dtype=dtype, shape=a.shape[:-1])
        return
    if not a.flags.c_contiguous:
        raise _Failed("%s is in Fortran order; tensorwire stores C order" % path)
    if dtype is not None:
        tw.put(name, a, dtype=dtype, shape=a.shape)
    else:
        tw.put(name, a)


def _get_npy(tw, name, path):
    import numpy as np

    info = tw.stat(name)
    a = tw.get(name)
    if info.dtype in ("bf16", "f8e4m3", "f8e5m2"):
        a = a.view("V%d" % a.dtype.itemsize)  # like the C CLI: '|V2', '|V1'
    np.save(path, a, allow_pickle=False)


def _run(args):
    tw = tensorwire.connect(args.server, token_file=args.token_file, timeout=args.timeout, fabric=args.fabric)
    with tw:
        if args.cmd == "ls":
            for t in tw.ls(args.prefix):
                print("%-32s %-7s %-24s %14d %s" % (t.name, t.dtype, _shape_text(t.shape), t.nbytes, t.device))
        elif args.cmd == "stat":
            t = tw.stat(args.name)
            print("name:   %s\ndtype:  %s\nshape:  %s\nbytes:  %d\ndevice: %s" % (
                t.name, t.dtype, _shape_text(t.shape), t.nbytes, t.device))
        elif args.cmd == "put":
            if args.file.endswith(".safetensors"):
                n = _put_safetensors(tw, args.name, args.file)
                if args.verbose:
                    print("stored %d tensors under %s/" % (n, args.name), file=sys.stderr)
            elif args.file.endswith(".npy"):
                _put_npy(tw, args.name, args.file, args.dtype)
            else:
                if args.dtype is None or args.shape is None:
                    raise _Failed("raw file %s needs --dtype and --shape" % args.file)
                with open(args.file, "rb") as f:
                    data = f.read()
                tw.put(args.name, data, dtype=args.dtype, shape=_parse_shape(args.shape))
        elif args.cmd == "get":
            if args.file.endswith(".safetensors"):
                n = _get_safetensors(tw, args.name, args.file)
                if args.verbose:
                    print("wrote %d tensors to %s" % (n, args.file), file=sys.stderr)
            elif args.file.endswith(".npy"):
                _get_npy(tw, args.name, args.file)
            else:
                with open(args.file, "wb") as f:
                    f.write(memoryview(tw.get(args.name)).cast("B"))
        elif args.cmd == "rm":
            tw.rm(*args.names)
        elif args.cmd == "ping":
            print("rtt %.1f us" % (tw.ping() * 1e6))
        elif args.cmd == "stats":
            for k, v in tw.stats().items():
                print(k, v)
        if args.verbose and args.cmd in ("put", "get"):
            print("data plane: %s" % tw.data_plane, file=sys.stderr)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tensorwire", description=__doc__.split("\n\n")[0])
    p.add_argument("-s", "--server", default=None, help="HOST:PORT (default $TENSORWIRE_SERVER or %s)" % tensorwire.DEFAULT_SERVER)
    p.add_argument("--token-file", default=None)
    p.add_argument("--timeout", type=float, default=None, help="seconds without progress")
    p.add_argument("--fabric", default=None, help="RDMA providers (auto, tcp, shm ...)")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("ls")
    s.add_argument("prefix", nargs="?", default="")
    s = sub.add_parser("stat")
    s.add_argument("name")
    for cmd in ("put", "get"):
        s = sub.add_parser(cmd)
        s.add_argument("name")
        s.add_argument("file")
        if cmd == "put":
            s.add_argument("--dtype", default=None)
            s.add_argument("--shape", default=None)
    s = sub.add_parser("rm")
    s.add_argument("names", nargs="+")
    sub.add_parser("ping")
    sub.add_parser("stats")
    args = p.parse_args(argv)
    what = args.cmd + (" " + args.name if hasattr(args, "name") else "")
    try:
        _run(args)
    except tensorwire.Error as e:
        print("tensorwire: %s: %s: %s" % (what, e.code_name or "ERROR", e.detail or e), file=sys.stderr)
        return 1
    except (_Failed, OSError, ValueError) as e:
        print("tensorwire: %s: %s" % (what, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
