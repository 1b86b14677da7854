"""Frames and the mutual HMAC handshake of interlink.transport.wire."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
import tracemalloc

import numpy as np
import pytest

from interlink.errors import AuthenticationError, CommTimeoutError, PeerLostError, ProtocolError
from interlink.transport import wire
from interlink.transport.wire import (
    authenticate_client,
    authenticate_server,
    recv_exact_into,
    recv_frame,
    send_frame,
)
from interlink.launch.secret import secret_from_env


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.settimeout(10)
    b.settimeout(10)
    yield a, b
    a.close()
    b.close()


def _in_thread(fn, *args):
    """Run fn(*args) in a thread; returns a callable giving (result, exception) after join."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()

    def join():
        t.join(20)
        assert not t.is_alive(), "helper thread hung"
        return box.get("result"), box.get("error")

    return join


# ---------------------------------------------------------------------------- frames


@pytest.mark.parametrize("size", [0, 1, 100, 64 * 1024, 64 * 1024 + 1, 1 << 20, 3 * (1 << 20) + 7])
def test_frame_roundtrip(pair, size):
    a, b = pair
    payload = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    join = _in_thread(send_frame, a, payload)
    got = recv_frame(b, max_size=8 << 20)
    _, err = join()
    assert err is None
    assert got == payload
    assert isinstance(got, bytes)


def test_frame_from_memoryview_of_array(pair):
    a, b = pair
    arr = np.arange(1000, dtype=np.float64)
    send_frame(a, memoryview(arr))
    send_frame(a, memoryview(arr)[10:20])
    assert np.frombuffer(recv_frame(b, 1 << 20), dtype=np.float64).tolist() == arr.tolist()
    assert np.frombuffer(recv_frame(b, 1 << 20), dtype=np.float64).tolist() == arr[10:20].tolist()


def test_several_frames_back_to_back(pair):
    a, b = pair
    for i in range(50):
        send_frame(a, bytes([i]) * i)
    for i in range(50):
        assert recv_frame(b, 1024) == bytes([i]) * i


def test_oversized_header_is_protocol_error_without_allocating(pair):
    a, b = pair
    a.sendall(struct.pack("<Q", 1 << 62) + b"garbage")
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match="above the limit"):
            recv_frame(b, max_size=64 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_garbage_header_within_limit_does_not_allocate_it(pair):
    # a header that claims 512 MiB (allowed by the limit) followed by a few bytes and EOF
    a, b = pair
    a.sendall(struct.pack("<Q", 512 << 20) + b"x" * 100)
    a.close()
    tracemalloc.start()
    try:
        with pytest.raises(PeerLostError, match="truncated"):
            recv_frame(b, max_size=1 << 30)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_eof_mid_frame_is_peer_lost(pair):
    a, b = pair
    a.sendall(struct.pack("<Q", 1000) + b"y" * 10)
    a.close()
    with pytest.raises(PeerLostError, match="after 10 of 1000 bytes"):
        recv_frame(b, 1 << 20)


def test_eof_mid_header_is_peer_lost(pair):
    a, b = pair
    a.sendall(b"\x01\x02\x03")
    a.close()
    with pytest.raises(PeerLostError):
        recv_frame(b, 1 << 20)


def test_clean_eof_is_peer_lost(pair):
    a, b = pair
    a.close()
    with pytest.raises(PeerLostError):
        recv_frame(b, 1 << 20)


def test_recv_exact_into_deadline(pair):
    a, b = pair
    a.sendall(b"abc")
    buf = bytearray(10)
    t0 = time.monotonic()
    with pytest.raises(CommTimeoutError, match="got 3 of 10"):
        recv_exact_into(b, memoryview(buf), deadline=time.monotonic() + 0.3)
    assert time.monotonic() - t0 < 2.0
    assert bytes(buf[:3]) == b"abc"


def test_recv_exact_into_fills_across_writes(pair):
    a, b = pair
    buf = bytearray(6)

    def writer():
        for chunk in (b"ab", b"cd", b"ef"):
            a.sendall(chunk)
            time.sleep(0.01)

    join = _in_thread(writer)
    recv_exact_into(b, memoryview(buf))
    join()
    assert bytes(buf) == b"abcdef"


# ---------------------------------------------------------------------------- authentication


def test_auth_succeeds_with_same_secret_and_carries_hellos(pair):
    a, b = pair
    join = _in_thread(authenticate_server, a, b"s3cret", 5.0, b"server-hi")
    server_hello = authenticate_client(b, b"s3cret", 5.0, hello=b"rank 7")
    client_hello, err = join()
    assert err is None
    assert client_hello == b"rank 7"
    assert server_hello == b"server-hi"
    # the connection is usable for frames afterwards
    send_frame(b, b"after")
    assert recv_frame(a, 100) == b"after"


def test_auth_over_tcp():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        conn, _ = listener.accept()
        with conn:
            return authenticate_server(conn, b"k", 5.0)

    join = _in_thread(serve)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        assert authenticate_client(c, b"k", 5.0, hello=b"") == b""
    hello, err = join()
    listener.close()
    assert err is None and hello == b""


def test_auth_fails_on_both_ends_with_different_secrets(pair):
    a, b = pair
    join = _in_thread(authenticate_server, a, b"secret-A", 5.0)
    with pytest.raises(AuthenticationError, match="secrets differ"):
        authenticate_client(b, b"secret-B", 5.0)
    _, err = join()
    assert isinstance(err, AuthenticationError)
    assert "secret" in str(err)


def test_client_detects_impostor_server(pair):
    """A server that does not hold the secret but accepts everything is caught by the client."""
    a, b = pair

    def impostor():
        a.sendall(struct.pack("<4sHH32s", wire.MAGIC, wire.VERSION, 0, b"n" * 32))
        answer = a.recv(1024)
        a.sendall(struct.pack("<B32sI", 0, b"\0" * 32, 0))
        return answer

    join = _in_thread(impostor)
    with pytest.raises(AuthenticationError, match="failed to prove"):
        authenticate_client(b, b"real", 5.0)
    join()


def test_server_rejects_garbage(pair):
    a, b = pair
    join = _in_thread(authenticate_server, a, b"k", 5.0)
    b.recv(1024)
    b.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\0" * 100)
    _, err = join()
    assert isinstance(err, AuthenticationError)
    assert "not an interlink peer" in str(err)


def test_client_rejects_non_interlink_server(pair):
    a, b = pair
    a.sendall(b"SSH-2.0-OpenSSH_9.0\r\n" + b"\0" * 40)
    with pytest.raises(AuthenticationError, match="not an interlink server"):
        authenticate_client(b, b"k", 5.0)


def test_server_times_out_silent_client(pair):
    a, _b = pair
    t0 = time.monotonic()
    with pytest.raises(AuthenticationError, match="within 0.3s"):
        authenticate_server(a, b"k", 0.3)
    assert time.monotonic() - t0 < 2.0


def test_short_read_is_authentication_error(pair):
    a, b = pair
    join = _in_thread(authenticate_server, a, b"k", 5.0)
    b.recv(1024)
    b.sendall(wire.MAGIC + b"\x01\x00")
    b.close()
    _, err = join()
    assert isinstance(err, AuthenticationError)


def test_auth_restores_socket_timeout(pair):
    a, b = pair
    a.settimeout(None)
    b.settimeout(3.5)
    join = _in_thread(authenticate_server, a, b"k", 5.0)
    authenticate_client(b, b"k", 5.0)
    join()
    assert a.gettimeout() is None
    assert b.gettimeout() == 3.5


def test_auth_argument_checks(pair):
    a, _ = pair
    with pytest.raises(TypeError):
        authenticate_client(a, "text secret", 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        authenticate_client(a, b"k", 1.0, hello=b"x" * (wire.MAX_HELLO + 1))


# ---------------------------------------------------------------------------- the job secret


def test_secret_from_env_hex_and_raw(caplog):
    assert secret_from_env({"INTERLINK_SECRET": "00ff10"}) == b"\x00\xff\x10"
    assert secret_from_env({"INTERLINK_SECRET": "not hex!"}) == b"not hex!"
    assert secret_from_env({"INTERLINK_SECRET": "abc"}) == b"abc"  # odd length: raw text


def test_secret_from_env_is_none_when_unset():
    # no secret derived from public values here: interlink.launch.secret.job_secret decides (tests/test_security.py)
    assert secret_from_env({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "8"}) is None
    assert secret_from_env({"INTERLINK_SECRET": ""}) is None


def test_secret_from_env_reads_os_environ(monkeypatch):
    monkeypatch.setenv("INTERLINK_SECRET", "deadbeef")
    assert secret_from_env() == bytes.fromhex("deadbeef")
