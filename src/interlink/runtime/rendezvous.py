"""Rendezvous: a small authenticated key-value store, launcher detection, and a store barrier.

How a job meets
    Every process learns ``rank``, ``world_size`` and where rank 0 listens (``master_addr``,
    ``master_port``) from :func:`detect_env`. Rank 0 starts a :class:`StoreServer` there; every rank
    (rank 0 too) connects a :class:`StoreClient`. Every connection runs the mutual HMAC handshake of
    :mod:`interlink.transport.wire` with the job secret (:func:`~interlink.transport.wire.secret_from_env`),
    so a process of another job, or a port scanner, is refused without disturbing the job.

Launchers understood by :func:`detect_env` (first match wins; explicit arguments override)

    ============  ===========================  ==========================  ====================================
    source        rank / world size            local rank / local size     master address
    ============  ===========================  ==========================  ====================================
    ``env``       RANK, WORLD_SIZE             LOCAL_RANK,                 MASTER_ADDR, MASTER_PORT
                  (torchrun, ``interlink run``)  LOCAL_WORLD_SIZE
    ``openmpi``   OMPI_COMM_WORLD_RANK,        OMPI_COMM_WORLD_LOCAL_RANK, MASTER_ADDR, MASTER_PORT
                  OMPI_COMM_WORLD_SIZE         OMPI_COMM_WORLD_LOCAL_SIZE
    ``mpich``     PMI_RANK, PMI_SIZE           MPI_LOCALRANKID,            MASTER_ADDR, MASTER_PORT
                  (Hydra, Intel MPI)           MPI_LOCALNRANKS
    ``slurm``     SLURM_PROCID,                SLURM_LOCALID,              MASTER_ADDR, else the first host of
                  SLURM_STEP_NUM_TASKS or      SLURM_STEP_TASKS_PER_NODE   SLURM_STEP_NODELIST /
                  SLURM_NTASKS                 or SLURM_TASKS_PER_NODE     SLURM_JOB_NODELIST (where srun puts
                                               at SLURM_NODEID             task 0), else SLURM_LAUNCH_NODE_IPADDR
    ============  ===========================  ==========================  ====================================

    Defaults: ``MASTER_ADDR`` = ``127.0.0.1`` (only right for a single-host job; a warning is logged
    when the job is known to span hosts), ``MASTER_PORT`` = ``29500`` (torch.distributed's default).
    Unknown local rank / local size are ``None``: the runtime finds processes on the same host by
    exchanging a host identity, never from these variables.

Store protocol (one request frame, one response frame, see :mod:`interlink.transport.wire`)
    request ``<B op, <d timeout seconds (inf: forever), <I nfields`` then fields, each ``<I len`` +
    bytes; response ``<B status (0 ok, 1 timeout, 2 error), <I nfields`` then fields. Keys are UTF-8
    strings, values bytes; counters made by ``add`` are ASCII decimal, as in torch's TCPStore.

The server runs one daemon thread per connection (fine to a few thousand ranks); blocking ``get`` and
``wait`` are served with a condition variable, so they cost no polling.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import math
import os
import re
import selectors
import socket
import struct
import threading
import time
from typing import Iterable, Mapping, Sequence

from ..errors import AuthenticationError, CommTimeoutError, PeerLostError, ProtocolError
from ..transport.wire import (
    DEFAULT_MAX_FRAME,
    StaleServer,
    authenticate_client,
    authenticate_server,
    recv_frame,
    secret_from_env,
    send_frame,
)

__all__ = [
    "DEFAULT_MASTER_ADDR",
    "DEFAULT_MASTER_PORT",
    "StoreServer",
    "StoreClient",
    "detect_env",
    "rendezvous",
    "store_barrier",
]

log = logging.getLogger("interlink.rendezvous")

DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 29500

# seconds a client waits for the server's answer beyond the request's own timeout
_ANSWER_GRACE = 30.0

# ops
_SET, _GET, _ADD, _CHECK, _DELETE, _WAIT, _COMPARE_SET, _NUM_KEYS = range(1, 9)
_OP_NAMES = {
    _SET: "set",
    _GET: "get",
    _ADD: "add",
    _CHECK: "check",
    _DELETE: "delete",
    _WAIT: "wait",
    _COMPARE_SET: "compare_set",
    _NUM_KEYS: "num_keys",
}
# statuses
_OK, _TIMEOUT, _ERROR = 0, 1, 2

_REQ = struct.Struct("<BdI")
_RESP = struct.Struct("<BI")
_FIELD = struct.Struct("<I")


def _pack(head: bytes, fields: Sequence[bytes]) -> bytes:
    parts = [head]
    for f in fields:
        parts.append(_FIELD.pack(len(f)))
        parts.append(f)
    return b"".join(parts)


def _unpack_fields(buf: bytes, offset: int, n: int) -> list[bytes]:
    fields = []
    for _ in range(n):
        if offset + _FIELD.size > len(buf):
            raise ProtocolError("malformed store message: field header past the end of the frame")
        (k,) = _FIELD.unpack_from(buf, offset)
        offset += _FIELD.size
        if offset + k > len(buf):
            raise ProtocolError(f"malformed store message: a {k}-byte field runs past the end of the frame")
        fields.append(buf[offset : offset + k])
        offset += k
    if offset != len(buf):
        raise ProtocolError(f"malformed store message: {len(buf) - offset} trailing bytes")
    return fields


def _as_bytes(value: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"store values are bytes or str, got {type(value).__name__}")


def _as_keys(keys: str | Iterable[str]) -> list[str]:
    if isinstance(keys, str):
        return [keys]
    out = list(keys)
    for k in out:
        if not isinstance(k, str):
            raise TypeError(f"store keys are str, got {type(k).__name__}")
    return out


# --------------------------------------------------------------------------------------------
# server


def _bind_listener(host: str, port: int, backlog: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be in 0..65535, got {port}")
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise OSError(errno.EADDRNOTAVAIL, f"cannot resolve the store address {host!r}: {e}") from e
    infos.sort(key=lambda info: info[0] != socket.AF_INET)  # IPv4 first: IPv6 may be disabled
    family, socktype, proto, _, addr = infos[0]
    sock = socket.socket(family, socktype, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise OSError(
                errno.EADDRINUSE,
                f"cannot start the rendezvous store on {host or '*'}:{port}: address already in use. "
                f"Another process (another job, or a leftover of an earlier run) is listening on port "
                f"{port}. Pick a free port (MASTER_PORT=<port> or INTERLINK_MASTER_PORT=<port>, or `interlink run --master HOST:PORT`) "
                f"or stop that process.",
            ) from e
        if e.errno == errno.EADDRNOTAVAIL:
            raise OSError(
                errno.EADDRNOTAVAIL,
                f"cannot start the rendezvous store on {host}:{port}: {host!r} is not an address of "
                "this host (rank 0 must run on the host named by MASTER_ADDR)",
            ) from e
        raise
    return sock


class StoreServer:
    """A threaded TCP key-value store that only talks to processes holding ``secret``.

    ``port=0`` picks a free port; :attr:`port` tells which. The server starts serving at once;
    :meth:`close` stops it (also a context manager).
    """

    def __init__(
        self,
        host: str = DEFAULT_MASTER_ADDR,
        port: int = 0,
        secret: bytes = b"",
        max_frame: int = DEFAULT_MAX_FRAME,
        *,
        auth_timeout: float = 10.0,
        backlog: int = 4096,
        generation: int | None = None,
    ) -> None:
        if not isinstance(secret, (bytes, bytearray)):
            raise TypeError(f"secret must be bytes, got {type(secret).__name__}")
        self.host = host
        # the init() of this job the store serves: a client of another one (a rank that re-inits while
        # this store, of the previous init, is still shutting down) is answered STALE and tries again
        self.generation = generation
        self.max_frame = int(max_frame)
        self.auth_timeout = float(auth_timeout)
        self._secret = bytes(secret)
        self._data: dict[str, bytes] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._clients = 0  # authenticated connections alive
        self._socks: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._listener = _bind_listener(host, int(port), backlog)
        self.port: int = self._listener.getsockname()[1]
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name=f"interlink-store-{self.port}", daemon=True
        )
        self._accept_thread.start()
        log.debug("rendezvous store listening on %s:%d", host, self.port)

    # ---- lifecycle

    def __enter__(self) -> "StoreServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def num_clients(self) -> int:
        """Authenticated connections currently open."""
        with self._cond:
            return self._clients

    def close(self, linger: float = 0.0) -> None:
        """Stop serving and close every socket.

        ``linger`` > 0 first waits up to that many seconds for the authenticated clients to
        disconnect (close this process's own client first), so that answers already on their way
        reach the other ranks.
        """
        with self._cond:
            if self._closed:
                return
            if linger > 0:
                deadline = time.monotonic() + linger
                while self._clients > 0:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
            self._closed = True
            self._cond.notify_all()
            socks = list(self._socks)
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._accept_thread.join(5.0)
        self._listener.close()
        for s in socks:  # wake threads blocked in recv; each thread closes its own socket
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._cond:
            threads = list(self._threads)
        for t in threads:
            t.join(2.0)
        self._wake_r.close()
        self._wake_w.close()
        log.debug("rendezvous store on port %d closed", self.port)

    # ---- connections

    def _accept_loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        try:
            while True:
                with self._cond:
                    if self._closed:
                        return
                for key, _ in sel.select():
                    if key.fileobj is self._wake_r:
                        return
                    try:
                        conn, addr = self._listener.accept()
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError as e:
                        if self._closed:
                            return
                        log.debug("store accept failed: %s", e)
                        time.sleep(0.01)  # e.g. EMFILE: do not spin
                        continue
                    conn.settimeout(None)
                    try:
                        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    except OSError:
                        pass
                    t = threading.Thread(
                        target=self._serve, args=(conn, addr), name=f"interlink-store-conn-{addr}", daemon=True
                    )
                    with self._cond:
                        if self._closed:
                            conn.close()
                            return
                        self._socks.add(conn)
                        self._threads.add(t)
                    t.start()
        finally:
            sel.close()

    def _same_generation(self, hello: bytes) -> bool:
        if self.generation is None:
            return True
        words = hello.decode("utf-8", "replace").split()
        if "gen" not in words[:-1]:
            return True
        return words[words.index("gen") + 1] == str(self.generation)

    def _serve(self, conn: socket.socket, addr: object) -> None:
        who = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
        authenticated = False
        try:
            try:
                hello = authenticate_server(conn, self._secret, self.auth_timeout, accept=self._same_generation)
            except StaleServer as e:
                log.debug("rendezvous store: %s", e)
                return
            except AuthenticationError as e:
                # said where it happens: the side that refuses a stranger (a wrong INTERLINK_SECRET, another
                # job on this port) is the one that can tell
                log.warning("interlink: rank 0's rendezvous store on port %s refused a connection from %s: %s",
                            self.port, who, e)
                return
            if hello:
                who = f"{hello.decode('utf-8', 'replace')} ({who})"
            with self._cond:
                if self._closed:
                    return
                self._clients += 1
                authenticated = True
            log.debug("rendezvous store: %s connected", who)
            while True:
                try:
                    request = recv_frame(conn, self.max_frame)
                except PeerLostError:
                    log.debug("rendezvous store: %s disconnected", who)
                    return
                except (ProtocolError, CommTimeoutError) as e:
                    log.warning("rendezvous store: dropping %s: %s", who, e)
                    return
                try:
                    response = self._handle(request)
                except ProtocolError as e:
                    log.warning("rendezvous store: dropping %s: %s", who, e)
                    return
                if response is None:  # server closing
                    return
                try:
                    send_frame(conn, response)
                except (PeerLostError, CommTimeoutError):
                    log.debug("rendezvous store: %s went away before its answer", who)
                    return
        except Exception:  # never let one connection's bug kill the server quietly
            log.exception("rendezvous store: error serving %s", who)
        finally:
            try:
                conn.close()
            except OSError:
                pass
            with self._cond:
                self._socks.discard(conn)
                self._threads.discard(threading.current_thread())
                if authenticated:
                    self._clients -= 1
                    self._cond.notify_all()

    # ---- requests

    def _wait_for(self, keys: list[str], timeout: float) -> list[str] | None:
        """With self._cond held: wait until every key exists; the missing ones at timeout,
        or None when the server closes."""
        deadline = time.monotonic() + timeout if math.isfinite(timeout) else None
        while True:
            if self._closed:
                return None
            missing = [k for k in keys if k not in self._data]
            if not missing:
                return []
            if deadline is None:
                self._cond.wait()
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return missing
            self._cond.wait(remaining)

    def _handle(self, request: bytes) -> bytes | None:
        if len(request) < _REQ.size:
            raise ProtocolError(f"malformed store request: {len(request)} bytes")
        op, timeout, nfields = _REQ.unpack_from(request, 0)
        fields = _unpack_fields(request, _REQ.size, nfields)
        if op not in _OP_NAMES:
            raise ProtocolError(f"unknown store op {op}")
        if math.isnan(timeout):
            raise ProtocolError("store request with a NaN timeout")
        nargs = {_SET: 2, _GET: 1, _ADD: 2, _DELETE: 1, _COMPARE_SET: 4, _NUM_KEYS: 0}
        if op in nargs and len(fields) != nargs[op]:
            raise ProtocolError(f"store {_OP_NAMES[op]} takes {nargs[op]} fields, got {len(fields)}")
        # text fields: keys (every field of check/wait, the first of the others) and add's delta
        ntext = len(fields) if op in (_CHECK, _WAIT) else 2 if op == _ADD else min(len(fields), 1)
        try:
            strs = [f.decode("utf-8") for f in fields[:ntext]]
        except UnicodeDecodeError as e:
            raise ProtocolError(f"store key is not UTF-8: {e}") from e

        def ok(*out: bytes) -> bytes:
            return _pack(_RESP.pack(_OK, len(out)), out)

        with self._cond:
            if self._closed:
                return None
            if op == _SET:
                self._data[strs[0]] = fields[1]
                self._cond.notify_all()
                return ok()
            if op == _GET:
                missing = self._wait_for([strs[0]], timeout)
                if missing is None:
                    return None
                if missing:
                    return _pack(_RESP.pack(_TIMEOUT, 0), [])
                return ok(self._data[strs[0]])
            if op == _ADD:
                key = strs[0]
                try:
                    delta = int(strs[1])
                    current = int(self._data.get(key, b"0"))
                except ValueError:
                    msg = f"add({key!r}): the stored value {self._data.get(key)!r} is not an integer"
                    return _pack(_RESP.pack(_ERROR, 1), [msg.encode()])
                value = current + delta
                self._data[key] = str(value).encode()
                self._cond.notify_all()
                return ok(str(value).encode())
            if op == _CHECK:
                missing_keys = [k for k in strs if k not in self._data]
                return ok(*(k.encode() for k in missing_keys))
            if op == _DELETE:
                existed = self._data.pop(strs[0], None) is not None
                return ok(b"1" if existed else b"0")
            if op == _WAIT:
                missing = self._wait_for(strs, timeout)
                if missing is None:
                    return None
                if missing:
                    return _pack(_RESP.pack(_TIMEOUT, len(missing)), [k.encode() for k in missing])
                return ok()
            if op == _COMPARE_SET:
                key, has_expected, expected, desired = strs[0], fields[1] == b"1", fields[2], fields[3]
                current = self._data.get(key)
                swapped = (current is None and not has_expected) or (
                    current is not None and has_expected and current == expected
                )
                if swapped:
                    self._data[key] = desired
                    self._cond.notify_all()
                    current = desired
                return ok(b"1" if swapped else b"0", b"" if current is None else b"1", current or b"")
            if op == _NUM_KEYS:
                return ok(str(len(self._data)).encode())
        raise AssertionError(f"unhandled op {op}")  # pragma: no cover


# --------------------------------------------------------------------------------------------
# client


class StoreClient:
    """A connection to a :class:`StoreServer`.

    Connects with retries until ``connect_timeout`` (default: ``timeout``), since the server may
    start after the clients; authenticates with ``secret``. ``timeout`` is the default of the
    blocking calls (:meth:`get`, :meth:`wait`). Thread-safe: one request at a time per client.
    A server that goes away raises :class:`PeerLostError`; the next call tries one quick reconnect.
    """

    def __init__(
        self,
        host: str,
        port: int,
        secret: bytes,
        timeout: float = 300.0,
        connect_timeout: float | None = None,
        *,
        name: str = "",
        max_frame: int = DEFAULT_MAX_FRAME,
    ) -> None:
        if not isinstance(secret, (bytes, bytearray)):
            raise TypeError(f"secret must be bytes, got {type(secret).__name__}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.host = host
        self.port = int(port)
        self.timeout = float(timeout)
        self.connect_timeout = float(timeout if connect_timeout is None else connect_timeout)
        self.name = name
        self.max_frame = int(max_frame)
        self._secret = bytes(secret)
        self._lock = threading.Lock()
        self._closed = False
        self._sock: socket.socket | None = self._connect(self.connect_timeout, retry=True)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _connect(self, window: float, retry: bool) -> socket.socket:
        deadline = time.monotonic() + window
        delay = 0.02
        last: Exception | None = None
        while True:
            remaining = deadline - time.monotonic()
            try:
                sock = socket.create_connection((self.host, self.port), timeout=max(min(remaining, 10.0), 0.05))
                break
            except OSError as e:
                last = e
            remaining = deadline - time.monotonic()
            if not retry or remaining <= 0:
                if retry:
                    raise CommTimeoutError(
                        f"could not reach the rendezvous store at {self.address} within {window:g}s "
                        f"({last}); is rank 0 running, and do MASTER_ADDR/MASTER_PORT point at it?"
                    ) from last
                raise PeerLostError(f"the rendezvous store at {self.address} is gone ({last})") from last
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 1.0)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            auth_timeout = min(max(deadline - time.monotonic(), 5.0), 60.0)
            authenticate_client(sock, self._secret, auth_timeout, hello=self.name.encode("utf-8"))
        except StaleServer:
            sock.close()
            if not retry or deadline - time.monotonic() <= 0:
                raise
            time.sleep(0.05)  # the previous init's store is still shutting down: the new one comes next
            return self._connect(max(deadline - time.monotonic(), 0.0), retry)
        except BaseException:
            sock.close()
            raise
        sock.settimeout(self.timeout)
        return sock

    def __enter__(self) -> "StoreClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._sock is not None:
                try:
                    self._sock.close()
                finally:
                    self._sock = None

    def _drop(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None

    def _timeout(self, timeout: float | None) -> float:
        t = self.timeout if timeout is None else float(timeout)
        if math.isnan(t) or t < 0:
            raise ValueError(f"timeout must be >= 0 seconds (or inf), got {timeout}")
        return t

    def _request(self, op: int, fields: Sequence[bytes], wait: float = 0.0) -> tuple[int, list[bytes]]:
        payload = _pack(_REQ.pack(op, wait, len(fields)), fields)
        if len(payload) > self.max_frame:
            raise ValueError(
                f"store {_OP_NAMES[op]} request of {len(payload)} bytes exceeds the frame limit of "
                f"{self.max_frame} bytes"
            )
        what = _OP_NAMES[op]
        with self._lock:
            if self._closed:
                raise ValueError("the StoreClient is closed")
            if self._sock is None:  # broken earlier: one quick reconnect
                self._sock = self._connect(min(self.connect_timeout, 5.0), retry=False)
            sock = self._sock
            answer_within = (wait if math.isfinite(wait) else math.inf) + max(self.timeout, _ANSWER_GRACE)
            try:
                sock.settimeout(self.timeout)
                send_frame(sock, payload)
                deadline = time.monotonic() + answer_within if math.isfinite(answer_within) else None
                if deadline is None:
                    sock.settimeout(None)
                response = recv_frame(sock, self.max_frame, deadline)
            except CommTimeoutError as e:
                self._drop()
                raise CommTimeoutError(
                    f"the rendezvous store at {self.address} did not answer {what} "
                    f"within {answer_within:g}s (is rank 0 alive?)"
                ) from e
            except (PeerLostError, ProtocolError) as e:
                self._drop()
                raise PeerLostError(
                    f"lost the connection to the rendezvous store at {self.address} during {what} "
                    f"(did rank 0 exit or crash?): {e}"
                ) from e
        if len(response) < _RESP.size:
            raise ProtocolError(f"malformed store response to {what}: {len(response)} bytes")
        status, n = _RESP.unpack_from(response, 0)
        out = _unpack_fields(response, _RESP.size, n)
        if status == _ERROR:
            raise ValueError(out[0].decode("utf-8", "replace") if out else f"store {what} failed")
        return status, out

    # ---- the API

    def set(self, key: str, value: bytes | bytearray | memoryview | str) -> None:
        """Store ``value`` under ``key`` (overwrites) and wake every rank waiting for it."""
        self._request(_SET, [key.encode("utf-8"), _as_bytes(value)])

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value of ``key``, waiting up to ``timeout`` seconds (default: the client's) for a rank
        to set it; :class:`CommTimeoutError` naming the key otherwise."""
        t = self._timeout(timeout)
        status, out = self._request(_GET, [key.encode("utf-8")], t)
        if status == _TIMEOUT:
            raise CommTimeoutError(
                f"timed out after {t:g}s waiting for store key {key!r} on {self.address} "
                "(no rank has set it yet)"
            )
        return out[0]

    def add(self, key: str, delta: int = 1) -> int:
        """Atomically add ``delta`` to the integer counter ``key`` (missing counts as 0); the new value."""
        status, out = self._request(_ADD, [key.encode("utf-8"), str(int(delta)).encode()])
        return int(out[0])

    def missing(self, keys: str | Iterable[str]) -> list[str]:
        """The keys among ``keys`` that do not exist now (no waiting)."""
        ks = _as_keys(keys)
        _, out = self._request(_CHECK, [k.encode("utf-8") for k in ks])
        return [k.decode("utf-8") for k in out]

    def check(self, keys: str | Iterable[str]) -> bool:
        """Whether every key in ``keys`` exists now (no waiting)."""
        return not self.missing(keys)

    def delete(self, key: str) -> bool:
        """Delete ``key``; whether it existed."""
        _, out = self._request(_DELETE, [key.encode("utf-8")])
        return out[0] == b"1"

    def wait(self, keys: str | Iterable[str], timeout: float | None = None) -> None:
        """Wait up to ``timeout`` seconds until every key exists; :class:`CommTimeoutError` naming
        the missing keys otherwise."""
        ks = _as_keys(keys)
        t = self._timeout(timeout)
        status, out = self._request(_WAIT, [k.encode("utf-8") for k in ks], t)
        if status == _TIMEOUT:
            missing = [k.decode("utf-8") for k in out]
            raise CommTimeoutError(
                f"timed out after {t:g}s waiting for store key(s) {missing} on {self.address}"
            )

    def compare_set(
        self, key: str, expected: bytes | str | None, desired: bytes | str
    ) -> tuple[bool, bytes | None]:
        """Atomically set ``key`` to ``desired`` if its value is ``expected`` (``None``: if it does
        not exist). Returns ``(swapped, value now stored or None)``."""
        fields = [
            key.encode("utf-8"),
            b"0" if expected is None else b"1",
            b"" if expected is None else _as_bytes(expected),
            _as_bytes(desired),
        ]
        _, out = self._request(_COMPARE_SET, fields)
        return out[0] == b"1", (out[2] if out[1] == b"1" else None)

    def num_keys(self) -> int:
        _, out = self._request(_NUM_KEYS, [])
        return int(out[0])


# --------------------------------------------------------------------------------------------
# environment detection


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def _first_host(nodelist: str) -> str | None:
    """The first host of a Slurm node list when it is simple: ``n[001-004],m7`` -> ``n001``."""
    s = nodelist.strip()
    depth = 0
    for i, c in enumerate(s):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            s = s[:i]
            break
    if not s:
        return None
    if "[" not in s:
        return s
    m = re.fullmatch(r"([^\[\],]*)\[([^\[\]]+)\]([^\[\],]*)", s)
    if not m:
        return None
    prefix, ranges, suffix = m.groups()
    first = ranges.split(",")[0].split("-")[0].strip()
    return prefix + first + suffix if first else None


def _slurm_task_counts(spec: str) -> list[int]:
    """A Slurm tasks-per-node list such as ``4(x2),2`` expanded per node: ``[4, 4, 2]``."""
    counts: list[int] = []
    if not spec.strip():
        return counts
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            return []
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def _slurm_local_size(env: Mapping[str, str]) -> int | None:
    node_id = _env_int(env, "SLURM_NODEID")
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        counts = _slurm_task_counts(env.get(name, ""))
        if not counts:
            continue
        if node_id is not None:
            return counts[node_id] if 0 <= node_id < len(counts) else None
        return counts[0] if len(set(counts)) == 1 else None
    return None


# (source, rank var, world vars (first present wins), local rank var, local size var)
_FLAVOURS: tuple[tuple[str, str, tuple[str, ...], str, str | None], ...] = (
    ("env", "RANK", ("WORLD_SIZE",), "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    (
        "openmpi",
        "OMPI_COMM_WORLD_RANK",
        ("OMPI_COMM_WORLD_SIZE",),
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    ("mpich", "PMI_RANK", ("PMI_SIZE",), "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("slurm", "SLURM_PROCID", ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"), "SLURM_LOCALID", None),
)


def detect_env(
    rank: int | None = None,
    world_size: int | None = None,
    local_rank: int | None = None,
    local_world_size: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict:
    """Who this process is in the job and where rank 0 listens.

    Returns ``{"rank", "world_size", "local_rank", "local_world_size", "master_addr",
    "master_port", "source"}``; ``source`` names the launcher whose variables were used
    (``env``, ``openmpi``, ``mpich``, ``slurm``) or ``explicit``. Explicit arguments override the
    environment field by field; see the module docstring for the variables and defaults. Raises
    ``ValueError`` when rank or world size cannot be found or are inconsistent.
    """
    env = os.environ if environ is None else environ
    found: tuple[str, int, int, int | None, int | None] | None = None
    partial: list[str] = []
    for source, rank_var, world_vars, lrank_var, lsize_var in _FLAVOURS:
        r = _env_int(env, rank_var)
        w = None
        for wv in world_vars:
            w = _env_int(env, wv)
            if w is not None:
                break
        if r is None and w is None:
            continue
        if r is None or w is None:
            partial.append(f"{rank_var if r is not None else '/'.join(world_vars)} is set but "
                           f"{'/'.join(world_vars) if r is not None else rank_var} is not")
            continue
        lr = _env_int(env, lrank_var)
        ls = _env_int(env, lsize_var) if lsize_var else _slurm_local_size(env)
        found = (source, r, w, lr, ls)
        break

    source = "explicit" if rank is not None and world_size is not None else (found[0] if found else "explicit")
    if found is not None:
        env_rank, env_world, env_lrank, env_lsize = found[1:]
    else:
        env_rank = env_world = env_lrank = env_lsize = None
    final_rank = rank if rank is not None else env_rank
    final_world = world_size if world_size is not None else env_world
    if final_rank is None or final_world is None:
        looked = (
            "RANK/WORLD_SIZE (torchrun, `interlink run`), OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE "
            "(Open MPI), PMI_RANK/PMI_SIZE (MPICH, Intel MPI), SLURM_PROCID/SLURM_NTASKS (srun)"
        )
        what = " and ".join(
            n for n, v in (("rank", final_rank), ("world_size", final_world)) if v is None
        )
        hint = f" ({'; '.join(partial)})" if partial else ""
        raise ValueError(
            f"cannot determine {what}: pass rank= and world_size=, or start the processes with a "
            f"launcher; looked for {looked}{hint}"
        )
    final_rank, final_world = int(final_rank), int(final_world)
    if final_world < 1:
        raise ValueError(f"world_size must be >= 1, got {final_world} (source: {source})")
    if not 0 <= final_rank < final_world:
        raise ValueError(f"rank must be in 0..{final_world - 1}, got {final_rank} (source: {source})")

    # local values from the environment only when they describe the same world
    same_world = found is not None and env_world == final_world
    lrank = local_rank if local_rank is not None else (env_lrank if same_world else None)
    lsize = local_world_size if local_world_size is not None else (env_lsize if same_world else None)
    if final_world == 1:
        lrank = 0 if lrank is None else lrank
        lsize = 1 if lsize is None else lsize
    if lsize is not None and lsize < 1:
        raise ValueError(f"local_world_size must be >= 1, got {lsize}")
    if lrank is not None and lsize is not None and not 0 <= lrank < lsize:
        raise ValueError(f"local_rank must be in 0..{lsize - 1}, got {lrank}")

    addr_source = "argument"
    addr = master_addr
    if addr is None and env.get("MASTER_ADDR"):
        addr, addr_source = env["MASTER_ADDR"], "MASTER_ADDR"
    if addr is None and found is not None and found[0] == "slurm":
        for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
            host = _first_host(env.get(name, ""))
            if host:
                addr, addr_source = host, name
                break
        if addr is None and env.get("SLURM_LAUNCH_NODE_IPADDR"):
            addr, addr_source = env["SLURM_LAUNCH_NODE_IPADDR"], "SLURM_LAUNCH_NODE_IPADDR"
    if addr is None:
        addr, addr_source = DEFAULT_MASTER_ADDR, "default"
        if lsize is not None and lsize < final_world:
            log.warning(
                "MASTER_ADDR is not set and this job spans several hosts (%d ranks, %d on this host): "
                "the default %s only works on one host; export MASTER_ADDR=<host of rank 0>",
                final_world, lsize, DEFAULT_MASTER_ADDR,
            )
    if master_port is not None:
        port = int(master_port)
    else:
        env_port = _env_int(env, "INTERLINK_MASTER_PORT")
        if env_port is None:
            env_port = _env_int(env, "MASTER_PORT")
            # under torchrun its agent's own store already listens on MASTER_PORT: take the next port
            if env_port is not None and env.get("TORCHELASTIC_RUN_ID"):
                env_port += 1
        port = DEFAULT_MASTER_PORT if env_port is None else env_port
    if not 0 <= port <= 65535:
        raise ValueError(f"master_port must be in 0..65535, got {port}")
    log.debug("detect_env: rank %d of %d from %s, master %s:%d (%s)", final_rank, final_world, source, addr, port, addr_source)
    return {
        "rank": final_rank,
        "world_size": final_world,
        "local_rank": lrank,
        "local_world_size": lsize,
        "master_addr": addr,
        "master_port": port,
        "source": source,
    }


# --------------------------------------------------------------------------------------------
# rendezvous and barrier


def _default_bind(master_addr: str) -> str:
    """Where rank 0 binds: ``master_addr`` itself when it is a loopback address, else every
    interface of its family (as torch's TCPStore does), so a hostname that resolves to another
    local interface still works."""
    try:
        infos = socket.getaddrinfo(master_addr, None, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise OSError(errno.EADDRNOTAVAIL, f"cannot resolve MASTER_ADDR {master_addr!r}: {e}") from e
    ips = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    if all(ip.is_loopback for ip in ips):
        return master_addr
    return "0.0.0.0" if any(ip.version == 4 for ip in ips) else "::"


_GENERATION = 0


def rendezvous(
    rank: int,
    world_size: int,
    master_addr: str = DEFAULT_MASTER_ADDR,
    master_port: int = DEFAULT_MASTER_PORT,
    secret: bytes | None = None,
    timeout: float = 300.0,
    *,
    connect_timeout: float | None = None,
    bind_addr: str | None = None,
) -> tuple[StoreClient, StoreServer | None]:
    """Meet the other ranks: rank 0 starts the store, every rank connects a client.

    Returns ``(client, server)``; ``server`` is ``None`` except on rank 0, which should close it
    last (``client.close(); server.close(linger=...)``). ``secret`` defaults to
    ``INTERLINK_SECRET`` or a secret derived from the master address, port and world size.
    ``bind_addr`` defaults to ``master_addr`` when that is a loopback address and to all
    interfaces otherwise. With ``world_size == 1`` the store listens on a free loopback port.
    A busy ``master_port`` raises ``OSError(EADDRINUSE)`` naming the port.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    if secret is None:
        env = dict(os.environ)
        env.update(MASTER_ADDR=str(master_addr), MASTER_PORT=str(master_port), WORLD_SIZE=str(world_size))
        secret = secret_from_env(env)
    global _GENERATION
    _GENERATION += 1  # every init() of this process is a new generation of the job's store
    gen = _GENERATION
    name = f"rank {rank} gen {gen}"
    if world_size == 1:  # nobody else will connect: do not hold (or collide on) the job's port
        server = StoreServer("127.0.0.1", 0, secret)
        try:
            return StoreClient("127.0.0.1", server.port, secret, timeout, 10.0, name=name), server
        except BaseException:
            server.close()
            raise
    server = None
    if rank == 0:
        server = StoreServer(bind_addr or _default_bind(master_addr), int(master_port), secret, generation=gen)
    try:
        client = StoreClient(master_addr, server.port if server else int(master_port), secret, timeout,
                             connect_timeout, name=name)
    except BaseException:
        if server is not None:
            server.close()
        raise
    return client, server


def store_barrier(
    client: StoreClient, prefix: str, rank: int, world_size: int, timeout: float | None = None
) -> None:
    """Block until all ``world_size`` ranks have called ``store_barrier`` with this ``prefix``.

    Each use needs a fresh ``prefix`` (e.g. with a sequence number). On timeout raises
    :class:`CommTimeoutError` whose ``ranks`` are the ranks that did not arrive.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    if world_size == 1:
        return
    t = client.timeout if timeout is None else float(timeout)
    start = time.monotonic()
    client.set(f"{prefix}/arrived/{rank}", b"1")
    n = client.add(f"{prefix}/count", 1)
    if n > world_size:
        raise ValueError(
            f"store barrier {prefix!r} counted {n} arrivals for {world_size} ranks: a barrier prefix "
            "was reused (or two ranks share a rank number)"
        )
    done = f"{prefix}/done"
    if n == world_size:
        client.set(done, b"1")
        return
    try:
        client.wait(done, max(t - (time.monotonic() - start), 0.0))
    except CommTimeoutError:
        missing_keys = client.missing([f"{prefix}/arrived/{r}" for r in range(world_size)])
        missing = sorted(int(k.rsplit("/", 1)[1]) for k in missing_keys)
        raise CommTimeoutError(
            f"store barrier {prefix!r} timed out after {t:g}s on rank {rank}: "
            f"{len(missing)} of {world_size} ranks did not arrive: {missing}",
            op="barrier",
            ranks=missing,
        ) from None
