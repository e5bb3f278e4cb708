"""Every exception class, raised by a real situation (no mocks of the
library): a missing tensor, a full server, a token, a paused or killed
server, a peer speaking garbage."""
import socket
import threading

import numpy as np
import pytest

import tensorwire


def test_hierarchy():
    for cls in (tensorwire.NotFound, tensorwire.CapacityExceeded, tensorwire.DeviceUnavailable,
                tensorwire.Unauthorized, tensorwire.Timeout, tensorwire.ConnectionClosed,
                tensorwire.ProtocolError, tensorwire.InvalidArgument, tensorwire.Busy,
                tensorwire.ChecksumMismatch):
        assert issubclass(cls, tensorwire.Error)
    assert issubclass(tensorwire.NotFound, LookupError)
    assert issubclass(tensorwire.Timeout, TimeoutError)
    assert issubclass(tensorwire.ConnectionClosed, ConnectionError)
    assert issubclass(tensorwire.InvalidArgument, ValueError)


def test_not_found(client):
    with pytest.raises(tensorwire.NotFound) as e:
        client.get("err/none")
    assert e.value.code == -1001 and e.value.code_name == "NOT_FOUND"
    assert "err/none" in e.value.detail and "get 'err/none'" in str(e.value)
    assert e.value.index is None and e.value.name is None
    for call in (lambda: client.stat("err/none"), lambda: client.rm("err/none"),
                 lambda: client.get("err/none", out=bytearray(4))):
        with pytest.raises(tensorwire.NotFound):
            call()
    assert client.ping() > 0  # a request-level error leaves the connection usable


def test_invalid_argument(client):
    with pytest.raises(tensorwire.InvalidArgument) as e:
        client.put("", b"x")
    assert e.value.code_name == "INVALID_ARGUMENT"
    with pytest.raises(tensorwire.InvalidArgument):
        client.put("err/shape", b"abcd", dtype="f32", shape=(2,))
    with pytest.raises(tensorwire.InvalidArgument):
        client.put("err/dtype", b"abcd", dtype="f128")
    with pytest.raises(tensorwire.InvalidArgument):
        tensorwire.connect("127.0.0.1:1", push="sometimes")
    assert client.ping() > 0


def test_capacity_exceeded(own_server):
    s = own_server("--capacity", "1Mi")
    with tensorwire.connect(s.addr, timeout=60) as c:
        c.put("small", np.zeros(1000, np.uint8))
        with pytest.raises(tensorwire.CapacityExceeded) as e:
            c.put("big", np.zeros(2 << 20, np.uint8))
        assert e.value.code_name == "CAPACITY_EXCEEDED"
        with pytest.raises(tensorwire.CapacityExceeded) as e:
            c.put_many({"b1": np.zeros(600 << 10, np.uint8), "b2": np.zeros(600 << 10, np.uint8)})
        assert e.value.name in ("b1", "b2")
        assert c.stat("small").nbytes == 1000


def test_unauthorized(own_server, tmp_path):
    tok = tmp_path / "token"
    tok.write_text("s3cret-token-for-tests\n")
    tok.chmod(0o600)  # a token file others can read is refused
    s = own_server("--token-file", str(tok))
    with pytest.raises(tensorwire.Unauthorized) as e:
        tensorwire.connect(s.addr, timeout=30)
    assert e.value.code_name == "UNAUTHORIZED"
    with pytest.raises(tensorwire.Unauthorized):
        tensorwire.connect(s.addr, token="wrong", timeout=30)
    with tensorwire.connect(s.addr, token_file=tok, timeout=30) as c:
        assert c.ping() > 0
    with tensorwire.connect(s.addr, token="s3cret-token-for-tests", timeout=30) as c:
        assert c.ping() > 0


def test_timeout(own_server):
    s = own_server()
    c = tensorwire.connect(s.addr, timeout=0.5)
    c.put("t", b"1234")
    s.pause()  # the server answers nothing: no progress for 0.5 s
    try:
        with pytest.raises(tensorwire.Timeout) as e:
            c.get("t")
        assert isinstance(e.value, TimeoutError)
        # A timeout closes the connection: later calls say so.
        with pytest.raises(tensorwire.ConnectionClosed):
            c.ping()
    finally:
        s.resume()
        c.close()


def test_connection_refused():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    srv.close()  # nothing listens there now
    with pytest.raises(tensorwire.ConnectionClosed) as e:
        tensorwire.connect("127.0.0.1:%d" % port, timeout=10)
    assert e.value.code_name == "ECONNREFUSED"


def test_killed_server_mid_call(own_server):
    """A get blocked on a (paused) server that is then killed fails with
    ConnectionClosed; the client stays a valid object that says closed."""
    s = own_server()
    c = tensorwire.connect(s.addr, timeout=60)
    c.put("k", np.arange(1 << 20, dtype=np.float32))
    s.pause()
    result = {}
    entered = threading.Event()

    def worker():
        entered.set()
        try:
            c.get("k")
            result["ok"] = True
        except BaseException as e:  # noqa: B902 - the test inspects it
            result["exc"] = e

    th = threading.Thread(target=worker)
    th.start()
    entered.wait(30)
    # The request is on the wire (or about to be); the server dies before
    # answering.
    threading.Event().wait(0.3)
    s.kill()
    th.join(60)
    assert not th.is_alive()
    assert "ok" not in result, "get succeeded against a killed server"
    assert isinstance(result["exc"], tensorwire.ConnectionClosed), repr(result["exc"])
    with pytest.raises(tensorwire.ConnectionClosed):
        c.get("k")
    c.close()


def _garbage_server(reply):
    """A TCP peer that answers the HELLO with reply bytes."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        conn.settimeout(30)
        try:
            conn.recv(4096)
            conn.sendall(reply)
            conn.recv(4096)  # until the client closes
        except OSError:
            pass
        conn.close()
        srv.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    return "127.0.0.1:%d" % srv.getsockname()[1], th


def test_protocol_error():
    addr, th = _garbage_server(b"HTTP/1.1 400 Bad Request\r\n\r\n" + b"\xff" * 64)
    with pytest.raises(tensorwire.ProtocolError) as e:
        tensorwire.connect(addr, timeout=10)
    assert e.value.code <= -1100 or e.value.code_name == "PROTOCOL_ERROR", e.value
    th.join(30)


def test_closed_client(server):
    c = tensorwire.connect(server.addr)
    c.close()
    c.close()  # twice is fine
    with pytest.raises(tensorwire.ConnectionClosed):
        c.put("x", b"1")


def test_busy(own_server):
    s = own_server("--max-connections", "1")
    with tensorwire.connect(s.addr, timeout=30) as first:
        with pytest.raises(tensorwire.Busy) as e:
            tensorwire.connect(s.addr, timeout=30)
        assert e.value.code_name == "BUSY"
        assert first.ping() > 0


def test_checksum_round_trip(server):
    """checksum=True sends CRC32C with every put and verifies gets."""
    a = np.arange(1 << 16, dtype=np.int64)
    with tensorwire.connect(server.addr, checksum=True, timeout=60) as c:
        c.put("crc/a", a)
        assert np.array_equal(c.get("crc/a"), a)
        c.put_many({"crc/b": a[:100], "crc/c": a[100:300]})
        assert np.array_equal(c.get_many(["crc/b", "crc/c"])[1], a[100:300])
