"""PyTorch tensors: every dtype both ways, in place, device= output, CUDA."""
import numpy as np
import pytest

import tensorwire

torch = pytest.importorskip("torch")

DTYPES = ["float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8",
          "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"]
TW = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16",
      "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2", "int8": "i8", "int16": "i16",
      "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32",
      "uint64": "u64", "bool": "bool"}


def sample(dt, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = 1
    for d in shape:
        n *= d
    size = torch.empty((), dtype=dt).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
    t = raw.view(dt).reshape(shape) if n else torch.empty(shape, dtype=dt)
    if dt.is_floating_point and size > 1:
        t = torch.nan_to_num(t.float()).to(dt) if dt != torch.float64 else torch.nan_to_num(t)
    if dt == torch.bool:
        t = (raw.reshape(shape) & 1) == 1 if n else t
    return t.contiguous()


def raw(t):
    """The bytes of t (fp8 has no ==, NaN != NaN)."""
    return bytes(t.reshape(-1).view(torch.uint8).numpy())


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 4), (2, 1, 3)], ids=str)
def test_torch_roundtrip(client, name, shape):
    dt = getattr(torch, name, None)
    if dt is None:
        pytest.skip("torch %s has no %s" % (torch.__version__, name))
    t = sample(dt, shape)
    key = "pt/%s/%s" % (name, "x".join(map(str, shape)))
    client.put(key, t)
    assert client.stat(key)[1:4] == (TW[name], shape, t.numel() * t.element_size())
    back = client.get(key, device="cpu")
    assert back.dtype == dt and tuple(back.shape) == shape
    assert raw(back) == raw(t)
    out = torch.zeros(shape, dtype=dt)
    assert client.get(key, out=out) is out
    assert raw(out) == raw(t)


def test_torch_in_place_keeps_storage(client):
    t = torch.arange(1 << 16, dtype=torch.float32)
    client.put("pt/inplace", t)
    out = torch.zeros(1 << 16, dtype=torch.float32)
    ptr = out.data_ptr()
    client.get("pt/inplace", out=out)
    assert out.data_ptr() == ptr and torch.equal(out, t)
    # A slice of a larger tensor is a valid contiguous destination.
    big = torch.zeros(3, 1 << 16)
    client.get("pt/inplace", out=big[2])
    assert torch.equal(big[2], t) and not big[:2].any()


def test_torch_numpy_interop(client):
    """bf16 stored from torch reads back as uint16 bits through NumPy."""
    t = torch.tensor([1.0, -2.0, 0.5], dtype=torch.bfloat16)
    client.put("pt/bf", t)
    bits = client.get("pt/bf")
    assert bits.dtype == np.uint16
    assert torch.equal(torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16), t)
    # and NumPy bits go back in as bf16
    client.put("pt/bf2", bits, dtype=torch.bfloat16)
    assert torch.equal(client.get("pt/bf2", device="cpu"), t)


def test_torch_errors(client):
    client.put("pt/e", torch.zeros(2, 3))
    with pytest.raises(tensorwire.InvalidArgument):
        client.get("pt/e", out=torch.zeros(3, 2))
    with pytest.raises(tensorwire.InvalidArgument):
        client.get("pt/e", out=torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(tensorwire.InvalidArgument):
        client.put("pt/nc", torch.zeros(3, 4).t())
    with pytest.raises(tensorwire.InvalidArgument):
        client.put("pt/c", torch.zeros(3, dtype=torch.complex64))
    with pytest.raises(tensorwire.InvalidArgument):
        client.get("pt/e", out=torch.zeros(2, 3), device="cpu")


def test_torch_batches(client):
    blocks = [sample(torch.bfloat16, (16, 64), seed=i) for i in range(64)]
    names = ["pt/kv/%d" % i for i in range(64)]
    client.put_many(list(zip(names, blocks)))
    outs = [torch.empty(16, 64, dtype=torch.bfloat16) for _ in names]
    client.get_many(names, out=outs)
    assert all(torch.equal(a, b) for a, b in zip(outs, blocks))


class FakeCudaArray:
    """Just enough of __cuda_array_interface__ to reach the device path;
    the address is never dereferenced on a library without device support."""

    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0xDEAD0000, False),
                                "version": 3, "strides": None}


def test_device_memory_without_support(client):
    if tensorwire._tensorwire.DEVICE_MEMORY:
        pytest.skip("this libtensorwire takes device pointers")
    client.put("pt/dev", np.zeros(4, np.float32))
    with pytest.raises(tensorwire.DeviceUnavailable) as e:
        client.get("pt/dev", out=FakeCudaArray())
    assert e.value.code_name == "DEVICE_UNAVAILABLE" and "host memory only" in str(e.value)
    with pytest.raises(tensorwire.DeviceUnavailable):
        client.put("pt/dev2", FakeCudaArray())
    with pytest.raises(tensorwire.DeviceUnavailable):
        client.put_many({"pt/dev3": FakeCudaArray()})
    assert client.ping() > 0


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch.device("cuda:0")


def test_cuda_roundtrip(client):
    dev = _cuda()
    t = torch.arange(1 << 20, dtype=torch.float32, device=dev)
    if not tensorwire._tensorwire.DEVICE_MEMORY:
        with pytest.raises(tensorwire.DeviceUnavailable):
            client.put("cu/t", t)
        pytest.skip("libtensorwire without device pointers (issue #11)")
    client.put("cu/t", t)
    back = client.get("cu/t", device="cuda:0")
    assert back.device.type == "cuda" and torch.equal(back, t)
    out = torch.zeros_like(t)
    client.get("cu/t", out=out)
    assert torch.equal(out, t)
    assert torch.equal(client.get("cu/t", device="cpu"), t.cpu())
