"""python -m tensorwire: ls, stat, get/put of .npy and .safetensors, exit
statuses, and files the C CLI reads back."""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import BUILD

import tensorwire


def run(server, *args, expect=0):
    env = dict(os.environ, TENSORWIRE_SERVER=server.addr,
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(tensorwire.__file__))))
    p = subprocess.run([sys.executable, "-m", "tensorwire", *args], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == expect, "exit %d, want %d\nstdout: %s\nstderr: %s" % (
        p.returncode, expect, p.stdout, p.stderr)
    return p


def write_safetensors(path, tensors, metadata=None):
    """The format by hand: u64 LE header length, JSON header, data."""
    header, blob, off = {}, b"", 0
    for name, (st_dtype, arr) in tensors.items():
        raw = arr.tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blob += raw
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    return header, data[8 + n:]


def test_npy_put_get_ls_stat(server, tmp_path):
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    np.save(tmp_path / "a.npy", a)
    run(server, "put", "cli/a", str(tmp_path / "a.npy"))
    p = run(server, "ls", "cli/")
    assert p.stdout.split() == ["cli/a", "i32", "(2,3,4)", "96", "cpu"]
    p = run(server, "stat", "cli/a")
    assert "dtype:  i32" in p.stdout and "shape:  (2,3,4)" in p.stdout
    run(server, "get", "cli/a", str(tmp_path / "b.npy"))
    assert np.array_equal(np.load(tmp_path / "b.npy"), a)
    p = run(server, "get", "cli/none", str(tmp_path / "c.npy"), expect=1)
    assert "tensorwire: get cli/none: NOT_FOUND:" in p.stderr
    run(server, "bogus", expect=2)
    run(server, "rm", "cli/a")
    assert run(server, "ls", "cli/").stdout == ""


def test_bf16_npy_like_the_c_cli(server, tmp_path):
    """bf16 goes to .npy as '|V2' (as the C CLI writes it) and comes back
    with --dtype; the C CLI reads the file too."""
    bits = np.arange(6, dtype=np.uint16)
    with tensorwire.connect(server.addr) as c:
        c.put("cli/bf", bits.reshape(2, 3), dtype="bf16")
    run(server, "get", "cli/bf", str(tmp_path / "bf.npy"))
    v = np.load(tmp_path / "bf.npy")
    assert v.dtype == np.dtype("V2") and v.shape == (2, 3)
    p = run(server, "put", "cli/bf2", str(tmp_path / "bf.npy"), expect=1)
    assert "--dtype" in p.stderr
    run(server, "put", "cli/bf2", str(tmp_path / "bf.npy"), "--dtype", "bf16")
    with tensorwire.connect(server.addr) as c:
        assert c.stat("cli/bf2")[1:3] == ("bf16", (2, 3))
        assert np.array_equal(c.get("cli/bf2").reshape(-1), bits)
    cli = os.path.join(BUILD, "tensorwire")
    if os.access(cli, os.X_OK):
        subprocess.run([cli, "-s", server.addr, "put", "cli/bf3", str(tmp_path / "bf.npy"),
                        "--dtype", "bf16"], check=True, timeout=60)
        with tensorwire.connect(server.addr) as c:
            assert np.array_equal(c.get("cli/bf3").reshape(-1), bits)


def test_safetensors_round_trip(server, tmp_path):
    src = tmp_path / "model.safetensors"
    tensors = {
        "layer.0.weight": ("F32", np.arange(12, dtype=np.float32).reshape(3, 4)),
        "layer.0.bias": ("BF16", np.arange(4, dtype=np.uint16)),
        "emb": ("I64", np.arange(10, dtype=np.int64).reshape(2, 5)),
        "scale": ("F8_E4M3", np.arange(3, dtype=np.uint8)),
        "empty": ("F16", np.zeros((0, 3), np.float16)),
    }
    write_safetensors(src, tensors, {"format": "pt"})
    run(server, "put", "m1", str(src))
    with tensorwire.connect(server.addr) as c:
        infos = {t.name: t for t in c.ls("m1/")}
        assert set(infos) == {"m1/" + k for k in tensors}
        assert infos["m1/layer.0.bias"].dtype == "bf16"
        assert infos["m1/scale"].dtype == "f8e4m3"
        assert infos["m1/emb"].shape == (2, 5)
        assert np.array_equal(c.get("m1/layer.0.weight"), tensors["layer.0.weight"][1])
    out = tmp_path / "back.safetensors"
    run(server, "get", "m1", str(out))
    header, data = read_safetensors(out)
    assert set(header) == set(tensors)
    for name, (st, arr) in tensors.items():
        h = header[name]
        assert h["dtype"] == st and h["shape"] == list(arr.shape)
        lo, hi = h["data_offsets"]
        assert data[lo:hi] == arr.tobytes()
    # The file we wrote is itself valid input.
    run(server, "put", "m2", str(out))
    with tensorwire.connect(server.addr) as c:
        assert len(c.ls("m2/")) == len(tensors)
    p = run(server, "get", "nothing", str(tmp_path / "n.safetensors"), expect=1)
    assert "no tensor named nothing/*" in p.stderr


@pytest.mark.parametrize("content", [b"", b"\x05\x00", struct.pack("<Q", 1 << 40),
                                     struct.pack("<Q", 4) + b"[1]x"])
def test_bad_safetensors(server, tmp_path, content):
    f = tmp_path / "bad.safetensors"
    f.write_bytes(content)
    p = run(server, "put", "bad", str(f), expect=1)
    assert "tensorwire: put bad:" in p.stderr
