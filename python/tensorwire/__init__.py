"""tensorwire: put and get tensors on a tensorwired server, zero copy.

Example::

    import numpy as np
    import tensorwire

    with tensorwire.connect("127.0.0.1:7450") as tw:     # or $TENSORWIRE_SERVER
        tw.put("w0", np.arange(12, dtype=np.float32).reshape(3, 4))
        a = tw.get("w0")                      # a NumPy array (3, 4) float32
        out = np.empty((3, 4), np.float32)
        tw.get("w0", out=out)                 # filled in place, no copy
        t = tw.get("w0", device="cpu")        # a torch tensor

Bytes go straight from the caller's memory to the socket (or RDMA) and back
into it: NumPy arrays, bytes, bytearray, memoryview (anything exporting a
C-contiguous buffer) and PyTorch tensors are used in place. The GIL is
released during every transfer; use one Client per thread to run transfers in
parallel (a Client shared by threads serialises their calls).

NumPy has no bfloat16 or float8: a NumPy get of a bf16 tensor returns its raw
bits as uint16, of an f8 tensor as uint8 (``stat`` says the real dtype); use
``get(name, device="cpu")`` for a torch tensor of the real dtype, and
``put(name, bits, dtype="bf16")`` to store raw bits under that dtype.
"""
import os as _os
from typing import NamedTuple as _NamedTuple

from . import _tensorwire as _c
from ._tensorwire import (
    Busy,
    CapacityExceeded,
    ChecksumMismatch,
    ConnectionClosed,
    DeviceUnavailable,
    Error,
    InvalidArgument,
    NotFound,
    ProtocolError,
    Timeout,
    Unauthorized,
)

__all__ = [
    "connect", "Client", "TensorInfo", "DEFAULT_SERVER", "Error", "NotFound",
    "CapacityExceeded", "DeviceUnavailable", "Unauthorized", "Timeout", "ConnectionClosed",
    "ProtocolError", "InvalidArgument", "Busy", "ChecksumMismatch",
]
__version__ = _c.library_version()

DEFAULT_SERVER = "127.0.0.1:7450"

# Wire dtype codes (include/tensorwire/client.h, docs/protocol.md).
_F64, _F32, _F16, _BF16, _F8E4M3, _F8E5M2 = 1, 2, 3, 4, 5, 6
_I8, _I16, _I32, _I64, _U8, _U16, _U32, _U64, _BOOL = 7, 8, 9, 10, 11, 12, 13, 14, 15

# code -> NumPy dtype string; bf16 and f8 come back as their raw bits.
_NUMPY = {
    _F64: "<f8", _F32: "<f4", _F16: "<f2", _BF16: "<u2", _F8E4M3: "u1", _F8E5M2: "u1",
    _I8: "i1", _I16: "<i2", _I32: "<i4", _I64: "<i8", _U8: "u1", _U16: "<u2", _U32: "<u4",
    _U64: "<u8", _BOOL: "?",
}
_TORCH_NAMES = {
    _F64: "float64", _F32: "float32", _F16: "float16", _BF16: "bfloat16",
    _F8E4M3: "float8_e4m3fn", _F8E5M2: "float8_e5m2", _I8: "int8", _I16: "int16",
    _I32: "int32", _I64: "int64", _U8: "uint8", _U16: "uint16", _U32: "uint32",
    _U64: "uint64", _BOOL: "bool",
}
_torch = None
_torch_to_code = None  # {torch.dtype: code}, built on first use of torch


def _torch_module():
    """torch, imported the first time a tensor or device= needs it."""
    global _torch, _torch_to_code
    if _torch is None:
        import torch

        _torch_to_code = {}
        for code, name in _TORCH_NAMES.items():
            dt = getattr(torch, name, None)
            if dt is not None:
                _torch_to_code[dt] = code
        _torch = torch
    return _torch


def _is_torch(obj):
    # Cheap test that does not import torch for NumPy users.
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _dtype_code(dtype):
    """A dtype code from 'bf16'/'float32', a NumPy or a torch dtype."""
    if dtype is None:
        return 0
    if isinstance(dtype, int):
        _c.dtype_name(dtype)  # raises InvalidArgument when unknown
        return dtype
    if isinstance(dtype, str):
        return _c.dtype_from_string(dtype)
    if type(dtype).__module__.startswith("torch"):
        _torch_module()
        try:
            return _torch_to_code[dtype]
        except KeyError:
            raise InvalidArgument("torch dtype %s has no tensorwire dtype" % dtype) from None
    import numpy as np

    nd = np.dtype(dtype)
    for code, s in _NUMPY.items():
        if code not in (_BF16, _F8E4M3, _F8E5M2) and np.dtype(s) == nd:
            return code
    raise InvalidArgument("NumPy dtype %s has no tensorwire dtype" % nd)


def _torch_target(t):
    """(address, nbytes, code, shape, device) for a contiguous torch tensor."""
    _torch_module()
    if not t.is_contiguous():
        raise InvalidArgument("tensor is not contiguous: call .contiguous() first")
    try:
        code = _torch_to_code[t.dtype]
    except KeyError:
        raise InvalidArgument("torch dtype %s has no tensorwire dtype" % t.dtype) from None
    dev = 1 if t.device.type == "cuda" else 0
    if t.device.type not in ("cpu", "cuda"):
        raise DeviceUnavailable("device %s is not supported (cpu or cuda)" % t.device)
    return (t.data_ptr(), t.numel() * t.element_size(), code, tuple(t.shape), dev)


def _cai_target(obj):
    """A target from __cuda_array_interface__ (CuPy, Numba ...): CUDA memory."""
    cai = obj.__cuda_array_interface__
    import numpy as np

    nd = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is not None:
        expect, acc = [], nd.itemsize
        for d in reversed(shape):
            expect.append(acc)
            acc *= d
        if tuple(reversed(expect)) != tuple(strides):
            raise InvalidArgument("__cuda_array_interface__ array is not C-contiguous")
    n = nd.itemsize
    for d in shape:
        n *= d
    return (int(cai["data"][0]), n, _dtype_code(nd), shape, 1)


def _target(obj):
    """What the C extension takes for obj: the object itself when it exports
    a buffer, else a (address, nbytes, dtype, shape, device) tuple. The
    extension calls it only for objects without the buffer protocol, so
    NumPy arrays and bytes never pass through Python code here."""
    if _is_torch(obj):
        return _torch_target(obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return _cai_target(obj)
    if hasattr(obj, "__dlpack__") and not hasattr(obj, "__array_interface__"):
        # Any other DLPack producer: torch views its memory without a copy.
        return _torch_target(_torch_module().from_dlpack(obj))
    return obj


def _numpy_from(buf, code, shape):
    import numpy as np

    dt = np.dtype(_NUMPY[code])
    if len(buf) == 0:
        return np.empty(shape, dt)
    return np.frombuffer(buf, dtype=dt).reshape(shape)


def _torch_from(buf, code, shape):
    torch = _torch_module()
    name = _TORCH_NAMES[code]
    dt = getattr(torch, name, None)
    if dt is None:
        raise InvalidArgument("this torch (%s) has no %s; use the NumPy get" % (torch.__version__, name))
    if len(buf) == 0:
        return torch.empty(shape, dtype=dt)
    return torch.frombuffer(buf, dtype=torch.uint8).view(dt).reshape(shape)


_c._set_converter(_target)


class TensorInfo(_NamedTuple):
    """What stat() and ls() return for one tensor."""

    name: str
    dtype: str  # 'f32', 'bf16', 'f8e4m3' ...
    shape: tuple
    nbytes: int
    device: str  # the tag stored with the tensor, 'cpu'

    @classmethod
    def _from(cls, t):
        return cls(t[0], _c.dtype_name(t[1]), t[2], t[3], t[4])


_PUSH = {None: 0, "auto": 0, "always": 1, "never": 2}


class Client(_c.Client):
    """One connection to a tensorwired server; make it with connect().

    Usable as a context manager (closes on exit). Not shared state between
    threads: calls on one Client from several threads are serialised; give
    each thread its own Client to run transfers in parallel.
    """

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def put(self, name, tensor, *, dtype=None, shape=None):
        """Store tensor under name (replacing any tensor of that name).

        tensor: a C-contiguous NumPy array, bytes/bytearray/memoryview, or a
        contiguous torch tensor; sent from its own memory. dtype and shape
        reinterpret the bytes (e.g. ``put("kv", bits_u16, dtype="bf16")``;
        ``put("raw", b"...", dtype="u8", shape=(2, 2))``).

        >>> tw.put("w0", np.ones((2, 3), np.float32))
        """
        if dtype is None and shape is None:
            self._put(name, tensor)
        else:
            self._put(name, tensor, _dtype_code(dtype), None if shape is None else tuple(shape))

    def get(self, name, out=None, *, device=None):
        """Fetch name.

        - ``get(name)``: a new NumPy array (bf16 as uint16 bits, f8 as uint8
          bits) backed by the received buffer, no copy.
        - ``get(name, out=x)``: fills x in place and returns it; x is a NumPy
          array, bytearray, writable memoryview or torch tensor of the
          tensor's exact shape and dtype (raw bytes objects only need the
          size). A mismatch raises InvalidArgument (x's bytes are then
          unspecified).
        - ``get(name, device="cpu")`` or ``device="cuda:0"``: a new torch
          tensor on that device.

        >>> a = tw.get("w0")
        >>> tw.get("w0", out=a)
        >>> t = tw.get("w0", device="cuda:0")
        """
        if out is not None:
            if device is not None:
                raise InvalidArgument("give out= or device=, not both")
            self._get_into(name, out)
            return out
        if device is None:
            buf, code, shape = self._get_alloc(name)
            return _numpy_from(buf, code, shape)
        torch = _torch_module()
        dev = torch.device(device)
        if dev.type == "cpu":
            buf, code, shape = self._get_alloc(name)
            return _torch_from(buf, code, shape)
        info = self.stat(name)
        dt = getattr(torch, _TORCH_NAMES[_c.dtype_from_string(info.dtype)], None)
        if dt is None:
            raise InvalidArgument("this torch has no %s" % info.dtype)
        t = torch.empty(info.shape, dtype=dt, device=dev)
        self._get_into(name, t)
        return t

    def stat(self, name):
        """Describe name without fetching it: a TensorInfo.

        >>> tw.stat("w0")
        TensorInfo(name='w0', dtype='f32', shape=(2, 3), nbytes=24, device='cpu')
        """
        return TensorInfo._from(self._stat(name))

    def ls(self, prefix=""):
        """TensorInfo of every tensor whose name starts with prefix, by name.

        >>> [t.name for t in tw.ls("kv/")]
        """
        return [TensorInfo._from(t) for t in self._list(prefix)]

    def rm(self, *names):
        """Remove each name, in order; NotFound names the first missing one.

        >>> tw.rm("w0", "w1")
        """
        for i, n in enumerate(names):
            try:
                self._delete(n)
            except Error as e:
                if len(names) > 1:
                    e.index, e.name = i, n
                raise

    def put_many(self, tensors, stacked=None):
        """Store many tensors on one connection, max_inflight requests at a
        time. Three forms:

        - ``put_many({name: tensor, ...})`` or ``put_many([(name, tensor),
          ...])``: one tensor per name.
        - ``put_many(names, stacked)`` with ``stacked`` ONE C-contiguous
          tensor (NumPy array, torch tensor, CUDA array) whose first
          dimension is ``len(names)``: item i stores the row ``stacked[i]``
          (shape ``stacked.shape[1:]``, stacked's dtype) under ``names[i]``.
          The whole tensor is exported once; no per-row objects are made.
        - ``put_many(names, [t0, t1, ...])``: a list or tuple, one tensor
          per name.

        An error names the first failed item (e.index, e.name).

        >>> tw.put_many({"kv/%d" % i: blk for i, blk in enumerate(blocks)})
        >>> kv = np.zeros((1024, 16, 128), np.float16)     # 1024 blocks
        >>> tw.put_many(["kv/%d" % i for i in range(1024)], kv)
        """
        if stacked is not None:
            if isinstance(stacked, (list, tuple)):
                self._put_many(tensors, stacked)
            else:
                self._put_many_stacked(tensors, stacked)
            return
        if hasattr(tensors, "items"):
            self._put_many(list(tensors.keys()), list(tensors.values()))
            return
        pairs = list(tensors)
        self._put_many([p[0] for p in pairs], [p[1] for p in pairs])

    def get_many(self, names, out=None):
        """Fetch many tensors on one connection. Three forms, told apart by
        what ``out`` is:

        - ``get_many(names)``: a list of new NumPy arrays (one stat per name
          first: the sizes are not known otherwise).
        - ``get_many(names, out=[x0, x1, ...])``: ``out`` is a list or tuple,
          one destination per name; fills each x in place (one batch, no
          stat; one buffer export per item) and returns out.
        - ``get_many(names, out=T)``: ``out`` is anything else, ONE
          C-contiguous writable tensor (NumPy array, torch tensor on the CPU
          or CUDA, CUDA array) with ``T.shape[0] == len(names)``: item i
          fills the row ``T[i]``, which must match the stored tensor's shape
          (``T.shape[1:]``) and dtype. T is exported once for the whole
          call, the cheapest form for many blocks (e.g. a KV cache). Returns
          T.

        A wrong shape or dtype of an item, like any failed item, raises for
        the first failed item by index and names it (e.index, e.name); rows
        of other items are then filled or unspecified.

        >>> outs = [np.empty(4096, np.uint8) for _ in range(8)]
        >>> tw.get_many(["kv/%d" % i for i in range(8)], out=outs)
        >>> # a vLLM-style KV cache: one tensor [num_blocks, block...]
        >>> kv = torch.empty((1024, 16, 128), dtype=torch.float16, device="cuda")
        >>> tw.get_many(["kv/%d" % i for i in range(1024)], out=kv)
        """
        if out is None:
            return [_numpy_from(b, c, s) for b, c, s in self._get_many_alloc(list(names))]
        if isinstance(out, (list, tuple)):
            self._get_many(names, out)
        else:
            self._get_many_stacked(names, out)
        return out


def connect(addr=None, *, token=None, token_file=None, fabric=None, push=None, timeout=None,
            checksum=False):
    """Connect to a tensorwired server and return a Client.

    addr: "HOST:PORT" or "[v6]:PORT"; default $TENSORWIRE_SERVER, else
    127.0.0.1:7450. token / token_file: the shared secret when the server
    authenticates. fabric: RDMA providers ("auto", "tcp", "shm", ...; default
    inline TCP only). push: "auto", "always" or "never" (who writes on a get
    over RDMA). timeout: seconds without progress before a call fails with
    Timeout (also bounds connect); None keeps the library's defaults, 0 waits
    forever. checksum: CRC32C on every put and verified gets.

    >>> with tensorwire.connect() as tw:
    ...     tw.ping()
    """
    if addr is None:
        addr = _os.environ.get("TENSORWIRE_SERVER") or DEFAULT_SERVER
    if push not in _PUSH:
        raise InvalidArgument("push must be 'auto', 'always' or 'never', not %r" % (push,))
    timeout_ms = -1 if timeout is None else max(0, int(round(timeout * 1000)))
    if token is not None and not isinstance(token, str):
        token = bytes(token).decode()
    return Client(addr, token, None if token_file is None else _os.fspath(token_file), fabric,
                  _PUSH[push], timeout_ms, bool(checksum), "tensorwire-python/" + __version__)
