"""The job's key-value store: a small authenticated server run by rank 0, and its client.

Every connection runs the mutual HMAC handshake of :mod:`interlink.transport.wire` with the job secret
(:func:`~interlink.launch.secret.secret_from_env`), so a process of another job, or a port scanner, is
refused without disturbing the job. :mod:`interlink.runtime.rendezvous` uses it to meet; torch's store
plays the same part under the torch backend.

Store protocol (one request frame, one response frame, see :mod:`interlink.transport.wire`)
    request ``<B op, <d timeout seconds (inf: forever), <I nfields`` then fields, each ``<I len`` +
    bytes; response ``<B status (0 ok, 1 timeout, 2 error), <I nfields`` then fields. Keys are UTF-8
    strings, values bytes; counters made by ``add`` are ASCII decimal, as in torch's TCPStore.

The server runs one daemon thread per connection (fine to a few thousand ranks); blocking ``get`` and
``wait`` are served with a condition variable, so they cost no polling. Connections that have not yet proved
the secret are at most ``max_pending`` (a flood of silent connections closes the oldest of them, never holds a
thread each); each gets ``INTERLINK_AUTH_TIMEOUT_S`` (10 s) to answer.

Ranks taken once
    A rank's client names itself in the handshake (``rank R gen G pid P host H``, inside the MAC). The first
    process to claim a rank holds it for the life of the store; a claim of the same rank by another process
    (another pid or host) makes the store refuse every request from then on with :class:`RankConflictError`
    naming the rank and both claimants, so every rank of the job and the second claimant fail at their next
    store call; ``on_conflict`` (the runtime: abort the running job on every rank) is told too.
"""

from __future__ import annotations

import errno
import logging
import math
import selectors
import socket
import struct
import threading
import time
from typing import Callable, Iterable, Sequence

from ..errors import AuthenticationError, CommTimeoutError, PeerLostError, ProtocolError, RankConflictError
from ..launch.env import DEFAULT_MASTER_ADDR
from ..transport.wire import (
    DEFAULT_MAX_FRAME,
    StaleServer,
    Throttled,
    authenticate_client,
    authenticate_server,
    recv_frame,
    send_frame,
)

__all__ = ["StoreServer", "StoreClient"]

log = logging.getLogger("interlink.rendezvous")

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
_OK, _TIMEOUT, _ERROR, _CONFLICT = 0, 1, 2, 3

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
        auth_timeout: float | None = None,
        backlog: int = 4096,
        generation: int | None = None,
        world_size: int | None = None,
        on_conflict: Callable[[str], None] | None = None,
        max_pending: int = 64,
    ) -> None:
        if not isinstance(secret, (bytes, bytearray)):
            raise TypeError(f"secret must be bytes, got {type(secret).__name__}")
        self.host = host
        # the init() of this job the store serves: a client of another one (a rank that re-inits while
        # this store, of the previous init, is still shutting down) is answered STALE and tries again
        self.generation = generation
        self.max_frame = int(max_frame)
        if auth_timeout is None:
            from .policy import auth_timeout_s

            auth_timeout = auth_timeout_s()
        self.auth_timeout = float(auth_timeout)
        self.world_size = world_size
        self.on_conflict = on_conflict
        self.max_pending = max(1, int(max_pending))
        self._pending: dict[socket.socket, float] = {}  # connections still in the handshake, oldest first
        self._claims: dict[int, tuple[str, str, str]] = {}  # rank -> (pid, host, address) of its claimant
        self.conflict: str | None = None
        self._refusals = Throttled(log)
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
                        self._pending[conn] = time.monotonic()
                        evict = None
                        if len(self._pending) > self.max_pending:  # a flood: drop the oldest silent one
                            evict = next(iter(self._pending))
                            self._pending.pop(evict)
                    if evict is not None:
                        try:
                            evict.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
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
                self._refusals.warning("interlink: rank 0's rendezvous store on port %s refused a connection "
                                       "from %s: %s", self.port, who, e)
                return
            finally:
                with self._cond:
                    self._pending.pop(conn, None)
            addr_text = who
            if hello:
                who = f"{hello.decode('utf-8', 'replace')} ({who})"
            with self._cond:
                if self._closed:
                    return
                self._clients += 1
                authenticated = True
                conflict = self._claim(hello, addr_text)
            if conflict is not None:
                log.error("interlink: %s", conflict)
                if self.on_conflict is not None:
                    threading.Thread(target=self.on_conflict, args=(conflict,), daemon=True,
                                     name="interlink-rank-conflict").start()
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

    def await_claims(self, world_size: int, timeout: float) -> None:
        """Wait up to ``timeout`` seconds until every rank below ``world_size`` has connected (claimed), so that
        after a conflict the ranks still starting read why from this store before it closes."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._claims) < world_size and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def _claim(self, hello: bytes, addr: str) -> str | None:
        """With self._cond held: take the rank this client names (``rank R ... pid P host H``) for it; the
        message of a conflict when another process holds that rank (the store refuses everything after)."""
        words = hello.decode("utf-8", "replace").split()
        if len(words) < 2 or words[0] != "rank":
            return None
        try:
            rank = int(words[1])
        except ValueError:
            return None
        field = {words[i]: words[i + 1] for i in range(2, len(words) - 1, 2)}
        me = (field.get("pid", "?"), field.get("host", "?"), addr)
        first = self._claims.setdefault(rank, me)
        if first is me:
            self._cond.notify_all()  # await_claims
        if first[:2] == me[:2] or self.conflict is not None:
            return None
        self.conflict = (
            f"rank {rank} of this job was claimed twice: first by pid {first[0]} on host {first[1]} ({first[2]}), "
            f"then by pid {me[0]} on host {me[1]} ({me[2]}). The job cannot tell which is real and stops on every "
            f"rank. Was rank {rank} started twice (a launcher retry, two jobs on one MASTER_PORT), or is another "
            f"process posing as rank {rank}? Start each rank once; give the job its own INTERLINK_SECRET "
            f"(`interlink run` does).")
        self._cond.notify_all()
        return self.conflict

    # ---- requests

    def _wait_for(self, keys: list[str], timeout: float) -> list[str] | None:
        """With self._cond held: wait until every key exists; the missing ones at timeout,
        or None when the server closes."""
        deadline = time.monotonic() + timeout if math.isfinite(timeout) else None
        while True:
            if self._closed or self.conflict is not None:
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
            if self.conflict is not None:
                return _pack(_RESP.pack(_CONFLICT, 1), [self.conflict.encode()])
            if self._closed:
                return None
            if op == _SET:
                self._data[strs[0]] = fields[1]
                self._cond.notify_all()
                return ok()
            if op == _GET:
                missing = self._wait_for([strs[0]], timeout)
                if missing is None:
                    return None if self.conflict is None else _pack(_RESP.pack(_CONFLICT, 1), [self.conflict.encode()])
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
                    return None if self.conflict is None else _pack(_RESP.pack(_CONFLICT, 1), [self.conflict.encode()])
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
            delay = min(delay * 2, 0.25)  # a refused connect is cheap: a rank that starts late is not kept waiting
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
        if status == _CONFLICT:
            msg = out[0].decode("utf-8", "replace") if out else "a rank was claimed twice"
            words = msg.split()
            taken = [int(words[1])] if len(words) > 1 and words[0] == "rank" and words[1].isdigit() else []
            raise RankConflictError(msg, op="init", group="world", ranks=taken)
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
