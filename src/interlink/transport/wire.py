"""Length-prefixed frames and mutual authentication over a stream socket.

Shared by the rendezvous store (:mod:`interlink.runtime.rendezvous`) and the TCP data transport.

Frame
    ``<Q`` (8 bytes, little-endian) payload length, then the payload. A length above the reader's
    ``max_size`` is a :class:`~interlink.errors.ProtocolError` before any allocation; a frame whose
    length is allowed is read into buffers that grow only as bytes actually arrive, so a garbage
    header never makes the reader allocate ``max_size`` up front.

Handshake (run once on every fresh connection, before any frame)
    1. server -> client: ``MAGIC, VERSION, flags, server_nonce[32]``
    2. client -> server: ``MAGIC, VERSION, flags, client_nonce[32], len(hello), mac_c[32], hello``
       with ``mac_c = HMAC-SHA256(secret, b"client" + server_nonce + client_nonce + hello)``
    3. server -> client: ``status, mac_s[32], len(hello'), hello'``
       with ``mac_s = HMAC-SHA256(secret, b"server" + client_nonce + server_nonce + hello')``;
       status 1 means "rejected" (then the server closes).

Both sides prove knowledge of the secret on a fresh random nonce of the other side, so a recorded
handshake cannot be replayed, and the distinct labels stop a reflection of one side's answer. The
optional ``hello`` payloads (e.g. a rank) travel inside the MACs, so they are authenticated too.
Frames after the handshake are not MACed: the secret keeps strangers out of the job, it does not
protect against an attacker who can rewrite packets on the wire.

Sockets must be blocking (a timeout is fine). Errors: a closed connection is
:class:`~interlink.errors.PeerLostError`, a socket timeout :class:`~interlink.errors.CommTimeoutError`,
any failed handshake :class:`~interlink.errors.AuthenticationError`.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import socket
import struct
import time
from typing import Callable, Mapping

from ..errors import AuthenticationError, CommTimeoutError, PeerLostError, ProtocolError

__all__ = [
    "MAGIC",
    "VERSION",
    "NONCE_SIZE",
    "MAX_HELLO",
    "DEFAULT_MAX_FRAME",
    "send_frame",
    "recv_frame",
    "recv_exact_into",
    "authenticate_server",
    "authenticate_client",
    "Throttled",
]

log = logging.getLogger("interlink")

MAGIC = b"ILNK"
VERSION = 1
NONCE_SIZE = 32
MAC_SIZE = 32
MAX_HELLO = 64 * 1024
DEFAULT_MAX_FRAME = 64 * 1024 * 1024

_LEN = struct.Struct("<Q")
# magic, version, flags, server nonce
_SERVER_HELLO = struct.Struct("<4sHH32s")
# magic, version, flags, client nonce, hello length, client mac
_CLIENT_ANSWER = struct.Struct("<4sHH32sI32s")
# status, server mac, hello length
_SERVER_ANSWER = struct.Struct("<B32sI")

_STATUS_OK = 0
_STATUS_REJECTED = 1
_STATUS_STALE = 2  # authenticated, but the server belongs to another generation of this job (an earlier init)


class StaleServer(AuthenticationError):
    """The peer holds this job's secret but serves an earlier (or later) init of it: try again."""

# frames up to this size are sent with one sendall (header and payload together)
_COALESCE = 64 * 1024
# a frame is read into buffers of at least this size, growing with what has arrived
_GROW = 1024 * 1024


# --------------------------------------------------------------------------------------------
# framing


def _peer_name(sock: socket.socket) -> str:
    try:
        peer = sock.getpeername()
    except OSError:
        return "peer"
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer) or "peer"


def recv_exact_into(sock: socket.socket, view: memoryview, deadline: float | None = None) -> None:
    """Fill ``view`` completely from ``sock``.

    ``deadline`` (a :func:`time.monotonic` value) bounds the whole read; without it each ``recv``
    uses the socket's own timeout. End of stream before ``view`` is full raises
    :class:`PeerLostError`, a timeout :class:`CommTimeoutError` (the stream is then out of step
    and should be closed), any other socket error :class:`PeerLostError`.
    """
    view = memoryview(view).cast("B")
    n = view.nbytes
    got = 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CommTimeoutError(
                    f"timed out receiving from {_peer_name(sock)}: got {got} of {n} bytes"
                )
            sock.settimeout(remaining)
        try:
            k = sock.recv_into(view[got:])
        except socket.timeout as e:  # TimeoutError on 3.10+
            raise CommTimeoutError(
                f"timed out receiving from {_peer_name(sock)}: got {got} of {n} bytes"
            ) from e
        except OSError as e:
            raise PeerLostError(
                f"connection to {_peer_name(sock)} failed while receiving ({got} of {n} bytes): {e}"
            ) from e
        if k == 0:
            raise PeerLostError(
                f"{_peer_name(sock)} closed the connection after {got} of {n} bytes"
                + (" (truncated frame)" if got else "")
            )
        got += k


def _sendall(sock: socket.socket, data: bytes | memoryview) -> None:
    try:
        sock.sendall(data)
    except socket.timeout as e:
        raise CommTimeoutError(f"timed out sending to {_peer_name(sock)}") from e
    except OSError as e:
        raise PeerLostError(f"connection to {_peer_name(sock)} failed while sending: {e}") from e


def send_frame(sock: socket.socket, payload: bytes | bytearray | memoryview) -> None:
    """Send ``payload`` as one frame: 8-byte little-endian length, then the bytes."""
    view = memoryview(payload).cast("B")
    header = _LEN.pack(view.nbytes)
    if view.nbytes <= _COALESCE:
        _sendall(sock, header + view.tobytes())
    else:
        _sendall(sock, header)
        _sendall(sock, view)


def recv_frame(sock: socket.socket, max_size: int = DEFAULT_MAX_FRAME, deadline: float | None = None) -> bytes:
    """Receive one frame and return its payload.

    A header announcing more than ``max_size`` bytes raises :class:`ProtocolError` without
    allocating; a stream that ends inside the frame raises :class:`PeerLostError`.
    """
    header = bytearray(_LEN.size)
    recv_exact_into(sock, memoryview(header), deadline)
    (n,) = _LEN.unpack(header)
    if n > max_size:
        raise ProtocolError(
            f"frame from {_peer_name(sock)} announces {n} bytes, above the limit of {max_size} "
            "bytes (a corrupt stream, or a peer that does not speak the interlink protocol)"
        )
    if n == 0:
        return b""
    if n <= _GROW:
        buf = bytearray(n)
        recv_exact_into(sock, memoryview(buf), deadline)
        return bytes(buf)
    # grow geometrically with what has arrived: memory follows the bytes received, not the header
    chunks: list[bytearray] = []
    got = 0
    while got < n:
        size = min(n - got, max(_GROW, got))
        chunk = bytearray(size)
        try:
            recv_exact_into(sock, memoryview(chunk), deadline)
        except PeerLostError as e:
            raise PeerLostError(
                f"{_peer_name(sock)} closed the connection inside a frame of {n} bytes "
                f"after at least {got} payload bytes (truncated frame)"
            ) from e
        chunks.append(chunk)
        got += size
    return b"".join(chunks)


# --------------------------------------------------------------------------------------------
# authentication


def _mac(secret: bytes, label: bytes, *parts: bytes) -> bytes:
    h = hmac.new(secret, label, hashlib.sha256)
    for p in parts:
        h.update(p)
    return h.digest()


def _check_args(secret: bytes, hello: bytes, timeout: float) -> None:
    if not isinstance(secret, (bytes, bytearray)):
        raise TypeError(f"secret must be bytes, got {type(secret).__name__}")
    if not isinstance(hello, (bytes, bytearray)):
        raise TypeError(f"hello must be bytes, got {type(hello).__name__}")
    if len(hello) > MAX_HELLO:
        raise ValueError(f"hello payload is {len(hello)} bytes, above the limit of {MAX_HELLO}")
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")


def _recv(sock: socket.socket, n: int, deadline: float) -> bytes:
    buf = bytearray(n)
    recv_exact_into(sock, memoryview(buf), deadline)
    return bytes(buf)


def authenticate_server(
    sock: socket.socket, secret: bytes, timeout: float = 10.0, hello: bytes = b"",
    accept: "Callable[[bytes], bool] | None" = None,
) -> bytes:
    """Run the server side of the handshake on a freshly accepted ``sock``.

    Returns the client's (authenticated) hello payload. Raises :class:`AuthenticationError` on any
    failure (wrong magic or version, wrong secret, short read, timeout); the caller should then
    close the socket. The socket's timeout is restored afterwards. ``accept(client_hello)`` False (the
    client is of another generation of the job) answers STALE, and the client retries.
    """
    _check_args(secret, hello, timeout)
    secret = bytes(secret)
    old_timeout = sock.gettimeout()
    deadline = time.monotonic() + timeout
    who = _peer_name(sock)
    try:
        server_nonce = secrets.token_bytes(NONCE_SIZE)
        sock.settimeout(timeout)
        _sendall(sock, _SERVER_HELLO.pack(MAGIC, VERSION, 0, server_nonce))
        magic, version, _flags, client_nonce, hello_len, mac_c = _CLIENT_ANSWER.unpack(
            _recv(sock, _CLIENT_ANSWER.size, deadline)
        )
        if magic != MAGIC:
            raise AuthenticationError(f"{who} is not an interlink peer (bad magic {magic!r})")
        if version != VERSION:
            raise AuthenticationError(
                f"{who} speaks interlink wire version {version}, this process speaks {VERSION} "
                "(mixed interlink versions in one job?)"
            )
        if hello_len > MAX_HELLO:
            raise AuthenticationError(f"{who} announced a {hello_len}-byte hello (limit {MAX_HELLO})")
        client_hello = _recv(sock, hello_len, deadline) if hello_len else b""
        expected = _mac(secret, b"client", server_nonce, client_nonce, client_hello)
        if not hmac.compare_digest(expected, mac_c):
            try:
                _sendall(sock, _SERVER_ANSWER.pack(_STATUS_REJECTED, bytes(MAC_SIZE), 0))
            except (CommTimeoutError, PeerLostError, OSError):
                pass
            claims = f" (calls itself {client_hello.decode('utf-8', 'replace')!r})" if client_hello else ""
            raise AuthenticationError(
                f"{who}{claims} failed authentication: it does not hold this job's secret (INTERLINK_SECRET "
                f"differs, or another job uses this port)"
            )
        if accept is not None and not accept(client_hello):
            try:
                _sendall(sock, _SERVER_ANSWER.pack(_STATUS_STALE, bytes(MAC_SIZE), 0))
            except (CommTimeoutError, PeerLostError, OSError):
                pass
            raise StaleServer(f"{who} ({client_hello.decode('utf-8', 'replace')}) belongs to another "
                              f"generation of this job")
        mac_s = _mac(secret, b"server", client_nonce, server_nonce, bytes(hello))
        _sendall(sock, _SERVER_ANSWER.pack(_STATUS_OK, mac_s, len(hello)) + bytes(hello))
        return client_hello
    except AuthenticationError:
        raise
    except CommTimeoutError as e:
        raise AuthenticationError(f"{who} did not complete authentication within {timeout}s") from e
    except (PeerLostError, OSError) as e:
        raise AuthenticationError(f"{who} dropped the connection during authentication: {e}") from e
    finally:
        try:
            sock.settimeout(old_timeout)
        except OSError:
            pass


def authenticate_client(
    sock: socket.socket, secret: bytes, timeout: float = 10.0, hello: bytes = b""
) -> bytes:
    """Run the client side of the handshake on a freshly connected ``sock``.

    ``hello`` (at most :data:`MAX_HELLO` bytes, e.g. this process's rank) is delivered to the server
    authenticated. Returns the server's hello payload. Raises :class:`AuthenticationError` on any
    failure; the socket's timeout is restored afterwards.
    """
    _check_args(secret, hello, timeout)
    secret = bytes(secret)
    hello = bytes(hello)
    old_timeout = sock.gettimeout()
    deadline = time.monotonic() + timeout
    who = _peer_name(sock)
    try:
        sock.settimeout(timeout)
        try:
            greeting = _recv(sock, _SERVER_HELLO.size, deadline)
        except (PeerLostError, OSError) as e:
            # closed before it said a word: a server shutting down (the previous init's store, whose
            # listener still took the connection), not a refusal -- a refusal comes as REJECTED
            raise StaleServer(f"{who} closed the connection before greeting: {e}") from e
        magic, version, _flags, server_nonce = _SERVER_HELLO.unpack(greeting)
        if magic != MAGIC:
            raise AuthenticationError(
                f"{who} is not an interlink server (bad magic {magic!r}); "
                "is MASTER_ADDR/MASTER_PORT pointing at another service?"
            )
        if version != VERSION:
            raise AuthenticationError(
                f"{who} speaks interlink wire version {version}, this process speaks {VERSION} "
                "(mixed interlink versions in one job?)"
            )
        client_nonce = secrets.token_bytes(NONCE_SIZE)
        mac_c = _mac(secret, b"client", server_nonce, client_nonce, hello)
        _sendall(sock, _CLIENT_ANSWER.pack(MAGIC, VERSION, 0, client_nonce, len(hello), mac_c) + hello)
        try:
            answer = _recv(sock, _SERVER_ANSWER.size, deadline)
        except (PeerLostError, OSError) as e:  # no answer at all: going away, not refusing (that is REJECTED)
            raise StaleServer(f"{who} closed the connection without answering: {e}") from e
        status, mac_s, hello_len = _SERVER_ANSWER.unpack(answer)
        if status == _STATUS_STALE:
            raise StaleServer(f"{who} serves another init() of this job (an earlier one still shutting down)")
        if status == _STATUS_REJECTED:
            raise AuthenticationError(
                f"{who} rejected this process's credentials: the job secrets differ "
                "(INTERLINK_SECRET must be the same on every rank)"
            )
        if status != _STATUS_OK:
            raise AuthenticationError(f"{who} answered the handshake with unknown status {status}")
        if hello_len > MAX_HELLO:
            raise AuthenticationError(f"{who} announced a {hello_len}-byte hello (limit {MAX_HELLO})")
        server_hello = _recv(sock, hello_len, deadline) if hello_len else b""
        expected = _mac(secret, b"server", client_nonce, server_nonce, server_hello)
        if not hmac.compare_digest(expected, mac_s):
            raise AuthenticationError(
                f"{who} failed to prove it holds this job's secret (an impostor, or a different job)"
            )
        return server_hello
    except AuthenticationError:
        raise
    except CommTimeoutError as e:
        raise AuthenticationError(f"{who} did not complete authentication within {timeout}s") from e
    except (PeerLostError, OSError) as e:
        raise AuthenticationError(
            f"{who} closed the connection during authentication (wrong secret, or not an "
            f"interlink server?): {e}"
        ) from e
    finally:
        try:
            sock.settimeout(old_timeout)
        except OSError:
            pass



# --------------------------------------------------------------------------------------------
# the job secret



class Throttled:
    """A warning said for each of the first ``burst`` events of a ``window``-second window, then once per window
    as a count (a flood of refused connections must not flood the log: 200 strangers make at most
    ``burst`` lines and a summary, never one line each)."""

    def __init__(self, logger: logging.Logger, burst: int = 5, window: float = 60.0) -> None:
        self.log, self.burst, self.window = logger, int(burst), float(window)
        self._start = -1e18
        self._said = 0
        self._held = 0
        self._last = ""

    def warning(self, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._start >= self.window:
            if self._held:
                self.log.warning("%d more like this in the last %.0f s, not shown (the last: %s)",
                                 self._held, now - self._start, self._last)
            self._start, self._said, self._held = now, 0, 0
        if self._said < self.burst:
            self._said += 1
            self.log.warning(msg + (" (further ones this minute are counted, not shown)"
                                    if self._said == self.burst else ""), *args)
        else:
            self._held += 1
            self._last = msg % args if args else msg
