"""Round trips of every dtype and shape, in-place gets, zero copy, batches."""
import numpy as np
import pytest

import tensorwire

SHAPES = [(), (0,), (1,), (7,), (3, 4), (2, 3, 4, 5), (0, 5), (1,) * 16]
NUMPY_DTYPES = ["f8", "f4", "f2", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "?"]
TW_NAMES = {"f8": "f64", "f4": "f32", "f2": "f16", "i1": "i8", "i2": "i16", "i4": "i32",
            "i8": "i64", "u1": "u8", "u2": "u16", "u4": "u32", "u8": "u64", "?": "bool"}


def sample(dtype, shape, seed=0):
    """Deterministic contents that differ per element (not all zero)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    raw = rng.integers(0, 256, size=n * np.dtype(dtype).itemsize, dtype=np.uint8)
    a = raw.view(dtype).reshape(shape)
    if np.dtype(dtype).kind == "f":
        a = np.nan_to_num(a)  # NaN != NaN would spoil the comparison
    if np.dtype(dtype).kind == "b":
        a = raw.view(np.uint8).reshape(shape) & 1 == 1
    return np.array(a, order="C")  # ascontiguousarray would make 0-d arrays 1-d


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_numpy_roundtrip(client, dtype, shape):
    a = sample(dtype, shape)
    name = "np/%s/%s" % (dtype, "x".join(map(str, shape)))
    client.put(name, a)
    info = client.stat(name)
    assert info == (name, TW_NAMES[dtype], shape, a.nbytes, "cpu")
    b = client.get(name)
    assert b.dtype == a.dtype and b.shape == a.shape
    assert b.tobytes() == a.tobytes()
    out = np.empty_like(a)
    if out.size:
        out.reshape(-1).view(np.uint8)[:] = 0x5A
    assert client.get(name, out=out) is out
    assert out.tobytes() == a.tobytes()


def test_get_into_keeps_memory(client):
    a = sample("f4", (256, 1024))
    client.put("inplace", a)
    out = np.zeros((256, 1024), np.float32)
    addr = out.__array_interface__["data"][0]
    client.get("inplace", out=out)
    assert out.__array_interface__["data"][0] == addr
    assert np.array_equal(out, a)
    # A view into a larger array is filled in place too.
    big = np.zeros((3, 256, 1024), np.float32)
    client.get("inplace", out=big[1])
    assert np.array_equal(big[1], a) and not big[0].any() and not big[2].any()


def test_get_returns_array_over_received_bytes(client):
    a = sample("i4", (1000,))
    client.put("owned", a)
    b = client.get("owned")
    # No copy into a fresh NumPy allocation: the array views the receive
    # buffer object, which keeps it alive.
    assert not b.flags.owndata
    assert isinstance(b.base, (tensorwire._tensorwire.Buffer, memoryview, np.ndarray))
    del a
    assert b.sum() == b.astype(np.int64).sum()


def test_bytes_like_objects(client):
    client.put("raw/bytes", b"hello world")
    assert client.stat("raw/bytes").dtype == "u8"
    assert client.get("raw/bytes").tobytes() == b"hello world"
    ba = bytearray(11)
    client.get("raw/bytes", out=ba)
    assert ba == b"hello world"
    mv = memoryview(bytearray(11))
    client.get("raw/bytes", out=mv)
    assert mv.tobytes() == b"hello world"
    # A raw destination takes any dtype of the same size.
    client.put("raw/f32", np.arange(4, dtype=np.float32))
    dst = bytearray(16)
    client.get("raw/f32", out=dst)
    assert bytes(dst) == np.arange(4, dtype=np.float32).tobytes()


def test_dtype_and_shape_override(client):
    bits = np.arange(12, dtype=np.uint16)
    client.put("bf/bits", bits.reshape(3, 4), dtype="bf16")
    assert client.stat("bf/bits")[1:3] == ("bf16", (3, 4))
    got = client.get("bf/bits")
    assert got.dtype == np.uint16 and np.array_equal(got, bits.reshape(3, 4))
    client.put("f8/bits", np.arange(6, dtype=np.uint8), dtype="f8e4m3", shape=(2, 3))
    assert client.stat("f8/bits")[1:3] == ("f8e4m3", (2, 3))
    assert client.get("f8/bits").tobytes() == bytes(range(6))
    client.put("f8/e5", bytes(range(6)), dtype="f8e5m2", shape=(6,))
    out = np.empty(6, np.uint8)  # raw bits of f8 fit u8
    client.get("f8/e5", out=out)
    assert out.tobytes() == bytes(range(6))
    client.put("raw/shaped", bytes(range(24)), dtype=np.float32, shape=(2, 3))
    assert client.stat("raw/shaped")[1:3] == ("f32", (2, 3))
    with pytest.raises(tensorwire.InvalidArgument):
        client.put("raw/bad", bytes(range(10)), dtype="f32")


def test_get_into_mismatch(client):
    client.put("mm", np.zeros((3, 4), np.float32))
    for bad in (np.empty((4, 3), np.float32), np.empty((3, 4), np.int32),
                np.empty((3, 5), np.float32), np.empty((2, 4), np.float32), bytearray(47)):
        with pytest.raises(tensorwire.InvalidArgument) as e:
            client.get("mm", out=bad)
        assert "f32 (3, 4)" in str(e.value) and e.value.code_name == "INVALID_ARGUMENT"
    # The connection stays usable after a too-small out (-ENOBUFS).
    assert client.get("mm").shape == (3, 4)
    with pytest.raises(ValueError):  # a read-only destination
        client.get("mm", out=bytes(48))
    with pytest.raises(ValueError):  # not C-contiguous
        client.get("mm", out=np.empty((4, 3), np.float32).T)


def test_non_contiguous_put_refused(client):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(ValueError):
        client.put("nc", a.T)
    with pytest.raises(tensorwire.InvalidArgument):
        client.put("cplx", np.zeros(3, np.complex64))


def test_ls_stat_rm_stats_ping(client):
    for i in range(3):
        client.put("lsr/%d" % i, np.full(i + 1, i, np.int16))
    got = client.ls("lsr/")
    assert [t.name for t in got] == ["lsr/0", "lsr/1", "lsr/2"]
    assert [t.shape for t in got] == [(1,), (2,), (3,)]
    assert all(t.dtype == "i16" and t.device == "cpu" for t in got)
    assert client.ls("lsr/none/") == []
    client.rm("lsr/0", "lsr/1")
    assert [t.name for t in client.ls("lsr/")] == ["lsr/2"]
    st = client.stats()
    assert st["tensors"] >= 1 and st["puts"] >= 3
    assert 0 < client.ping() < 30
    assert client.data_plane == "inline tcp"
    assert client.fabric_status.startswith("inline")


def test_put_many_get_many(client):
    blocks = {"kv/%04d" % i: sample("u1", (4096,), seed=i) for i in range(300)}
    client.put_many(blocks)
    names = sorted(blocks)
    outs = [np.empty(4096, np.uint8) for _ in names]
    assert client.get_many(names, out=outs) is outs
    for n, o in zip(names, outs):
        assert np.array_equal(o, blocks[n])
    got = client.get_many(names[:10])
    assert all(np.array_equal(g, blocks[n]) for n, g in zip(names[:10], got))
    # The list form of put_many, mixed dtypes, into one arena.
    client.put_many([("mix/a", np.arange(3, dtype=np.float64)), ("mix/b", b"xyz")])
    arena = np.zeros(27, np.uint8)
    a = arena[:24].view(np.float64)
    client.get_many(["mix/a", "mix/b"], out=[a, memoryview(arena[24:])])
    assert np.array_equal(a, np.arange(3.0)) and arena[24:].tobytes() == b"xyz"
    client.get_many([], out=[])
    assert client.get_many([]) == []


def test_batch_errors_name_the_item(client):
    client.put("be/0", np.zeros(4, np.int32))
    with pytest.raises(tensorwire.NotFound) as e:
        client.get_many(["be/0", "be/missing"], out=[np.empty(4, np.int32), np.empty(4, np.int32)])
    assert e.value.index == 1 and e.value.name == "be/missing"
    assert "be/missing" in str(e.value) and "item 1" in str(e.value)
    with pytest.raises(tensorwire.NotFound) as e:
        client.get_many(["be/missing", "be/0"])
    assert e.value.index == 0 and e.value.name == "be/missing"
    with pytest.raises(tensorwire.InvalidArgument) as e:
        client.get_many(["be/0"], out=[np.empty(5, np.int32)])
    assert e.value.index == 0 and e.value.name == "be/0"
    with pytest.raises(tensorwire.InvalidArgument) as e:
        client.put_many([("be/ok", b"1"), ("", b"2")])
    assert e.value.index == 1 and e.value.name == ""
    with pytest.raises(tensorwire.NotFound) as e:
        client.rm("be/0", "be/missing")
    assert e.value.index == 1 and e.value.name == "be/missing"
    with pytest.raises(tensorwire.InvalidArgument):
        client.get_many(["a", "b"], out=[bytearray(1)])
    assert client.ping() > 0  # still usable


def test_default_address_from_environment(server, monkeypatch):
    monkeypatch.setenv("TENSORWIRE_SERVER", server.addr)
    with tensorwire.connect() as c:
        assert c.ping() > 0
    assert c.closed
    with pytest.raises(tensorwire.ConnectionClosed):
        c.ping()
