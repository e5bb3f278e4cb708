"""The stacked batch form: get_many(names, out=T) and put_many(names, T) with
ONE tensor T whose first dimension is len(names); item i moves the row T[i].
T is exported once per call; rows are checked against the stored tensors
without making Python objects per item."""
import sys

import numpy as np
import pytest

import tensorwire


def names_of(prefix, n):
    return ["%s/%d" % (prefix, i) for i in range(n)]


def test_numpy_round_trip(client):
    rng = np.random.default_rng(7)
    kv = rng.standard_normal((64, 4, 32)).astype(np.float16)  # 64 blocks of 4x32
    names = names_of("st/np", 64)
    client.put_many(names, kv)
    # Each row is its own tensor on the server, of the row's shape and dtype.
    info = client.stat(names[5])
    assert (info.dtype, info.shape, info.nbytes) == ("f16", (4, 32), 4 * 32 * 2)
    assert np.array_equal(client.get(names[5]), kv[5])
    out = np.full_like(kv, 7)
    assert client.get_many(names, out=out) is out
    assert np.array_equal(out, kv)
    # Rows in another order land in that order.
    rev = np.empty_like(kv)
    client.get_many(names[::-1], out=rev)
    assert np.array_equal(rev, kv[::-1])
    # A contiguous slice of rows is a stacked tensor too.
    part = np.zeros_like(kv)
    client.get_many(names[8:16], out=part[8:16])
    assert np.array_equal(part[8:16], kv[8:16]) and not part[:8].any() and not part[16:].any()
    # The same rows through the list form and the pairs form agree.
    outs = [np.empty((4, 32), np.float16) for _ in names]
    client.get_many(names, out=outs)
    assert all(np.array_equal(o, k) for o, k in zip(outs, kv))


def test_forms_interoperate(client):
    blocks = [np.arange(16, dtype=np.int32) + 100 * i for i in range(8)]
    names = names_of("st/mix", 8)
    client.put_many(names, blocks)  # names + a list: one tensor per name
    out = np.zeros((8, 16), np.int32)
    client.get_many(names, out=out)
    assert np.array_equal(out, np.stack(blocks))
    client.put_many(tuple(names), np.stack(blocks)[::-1].copy())
    client.get_many(iter(names), out=out)  # names may be any iterable
    assert np.array_equal(out, np.stack(blocks)[::-1])


def test_one_dimensional_and_empty(client):
    # A 1-D T: each item is a scalar (shape ()).
    vals = np.arange(5, dtype=np.float64) * 1.5
    names = names_of("st/scalar", 5)
    client.put_many(names, vals)
    assert client.stat(names[3]).shape == ()
    out = np.zeros(5, np.float64)
    client.get_many(names, out=out)
    assert np.array_equal(out, vals)
    # No names, zero rows: nothing moves, no error.
    client.put_many([], np.zeros((0, 4), np.uint8))
    client.get_many([], out=np.zeros((0, 4), np.uint8))


def test_wrong_leading_dimension(client):
    names = names_of("st/lead", 4)
    client.put_many(names, np.zeros((4, 8), np.uint8))
    with pytest.raises(tensorwire.InvalidArgument) as e:
        client.get_many(names, out=np.zeros((3, 8), np.uint8))
    assert "4 names" in str(e.value) and "(3, 8)" in str(e.value)
    with pytest.raises(tensorwire.InvalidArgument):
        client.put_many(names, np.zeros((5, 8), np.uint8))
    with pytest.raises(tensorwire.InvalidArgument):
        client.get_many(names, out=np.zeros((), np.uint8))  # 0-d: no rows at all
    assert client.ping() > 0


def test_wrong_row_shape_or_dtype_names_the_item(client):
    names = names_of("st/row", 6)
    client.put_many(names, np.zeros((6, 2, 8), np.float32))
    client.put(names[4], np.zeros((4, 4), np.float32))  # same bytes, other shape
    out = np.zeros((6, 2, 8), np.float32)
    with pytest.raises(tensorwire.InvalidArgument) as e:
        client.get_many(names, out=out)
    assert (e.value.index, e.value.name) == (4, names[4])
    assert "item 4 'st/row/4'" in str(e.value) and "(4, 4)" in str(e.value)
    client.put(names[2], np.zeros((2, 8), np.int32))  # same shape, other dtype
    with pytest.raises(tensorwire.InvalidArgument) as e:
        client.get_many(names, out=out)
    assert (e.value.index, e.value.name) == (2, names[2]) and "i32" in str(e.value)
    client.put(names[1], np.zeros((2, 9), np.float32))  # bigger than a row
    with pytest.raises(tensorwire.InvalidArgument) as e:
        client.get_many(names, out=out)
    assert (e.value.index, e.value.name) == (1, names[1])
    client.rm(names[3])
    with pytest.raises(tensorwire.NotFound) as e:
        client.get_many(names[3:], out=np.zeros((3, 2, 8), np.float32))
    assert (e.value.index, e.value.name) == (0, names[3])
    assert client.ping() > 0


def test_non_contiguous_or_read_only_refused(client):
    names = names_of("st/nc", 4)
    base = np.zeros((4, 16), np.uint8)
    client.put_many(names, base)
    with pytest.raises(tensorwire.InvalidArgument):
        client.get_many(names, out=np.zeros((16, 4), np.uint8).T)
    with pytest.raises(tensorwire.InvalidArgument):
        client.put_many(names, np.zeros((4, 32), np.uint8)[:, ::2])
    ro = np.zeros((4, 16), np.uint8)
    ro.flags.writeable = False
    with pytest.raises(tensorwire.InvalidArgument):
        client.get_many(names, out=ro)
    # Neither a list nor a tensor: a TypeError that says what is expected.
    with pytest.raises(TypeError) as e:
        client.get_many(names, out=(x for x in [base]))
    assert "stacked tensor" in str(e.value)
    assert client.ping() > 0


def test_no_export_left_behind(client):
    """(Reference counts and live objects over 10,000 stacked calls:
    test_leaks.py.)"""
    names = names_of("st/exp", 4)
    # A finished call, failed or not, holds no export of T: a memoryview
    # with a live export cannot be released, a bytearray not resized.
    ba = bytearray(4 * 16)
    m = memoryview(ba).cast("B", (4, 16))
    client.put_many(names, np.arange(64, dtype=np.uint8).reshape(4, 16))
    client.get_many(names, out=m)
    with pytest.raises(tensorwire.InvalidArgument):
        client.get_many(names[:2], out=m)
    m.release()
    ba.append(0)
    assert bytes(ba[:64]) == bytes(range(64))


def test_torch_round_trip(client):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    kv = torch.randn((32, 8, 16), generator=g).to(torch.bfloat16)
    names = names_of("st/pt", 32)
    client.put_many(names, kv)
    assert client.stat(names[0]).dtype == "bf16"
    out = torch.zeros_like(kv)
    assert client.get_many(names, out=out) is out
    assert torch.equal(out, kv)
    with pytest.raises(tensorwire.InvalidArgument) as e:  # dtype from the server
        client.get_many(names, out=torch.zeros((32, 8, 16), dtype=torch.float16))
    assert (e.value.index, e.value.name) == (0, names[0])
    with pytest.raises(tensorwire.InvalidArgument):
        client.get_many(names, out=torch.zeros((16, 8, 32), dtype=torch.bfloat16).transpose(0, 2))
    with pytest.raises(tensorwire.InvalidArgument):
        client.get_many(names, out=torch.zeros((31, 8, 16), dtype=torch.bfloat16))
    before = sys.getrefcount(out)
    for _ in range(100):
        client.get_many(names, out=out)
    assert sys.getrefcount(out) == before


def test_cuda_round_trip(client):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if not tensorwire._tensorwire.DEVICE_MEMORY:
        pytest.skip("libtensorwire without device pointers (issue #11)")
    dev = torch.device("cuda:0")
    # A vLLM-style KV cache: one tensor [num_blocks, block_size, heads*dim].
    kv = torch.randn((256, 16, 64), device=dev).to(torch.float16)
    torch.cuda.synchronize()  # client.h: writes to a source finished before the call
    names = names_of("st/cu", 256)
    client.put_many(names, kv)
    host = torch.empty((256, 16, 64), dtype=torch.float16)
    client.get_many(names, out=host)
    assert torch.equal(host, kv.cpu())
    out = torch.zeros_like(kv)
    client.get_many(names, out=out)
    torch.cuda.synchronize()
    assert torch.equal(out, kv)
    with pytest.raises(tensorwire.InvalidArgument) as e:
        client.get_many(names, out=torch.zeros((256, 16, 32), dtype=torch.float16, device=dev))
    assert e.value.index == 0
