"""Connecting every pair of ranks: locality by exchanged host identity, then shm or TCP channels.

Each rank publishes (host identity, TCP address, Unix socket name) in the store. For each pair the
higher rank connects to the lower one:
  * same host (identical boot id, network namespace and hostname) -> one Unix socket (abstract
    namespace) that is the pair's control channel and carries the memfd of the shared-memory rings;
  * different hosts, or INTERLINK_TRANSPORT=tcp -> two TCP connections: control and data.
Every connection proves it belongs to the job (HMAC challenge with the job secret) before it is used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import struct
import threading
import time
from typing import Any

from ..errors import AuthenticationError, CommTimeoutError
from ..transport.shm import HostPage, ShmChannel
from ..transport.tcp import TcpChannel
from ..transport.wire import authenticate_client, authenticate_server
from .engine import Engine

log = logging.getLogger("interlink")


def host_identity() -> str:
    """Same string for processes that can share memory: boot id + network namespace + hostname.
    Ranks in different network namespaces (emulated hosts) are different hosts."""
    parts = []
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            parts.append(f.read().strip())
    except OSError:
        parts.append("noboot")
    try:
        parts.append(str(os.stat("/proc/self/ns/net").st_ino))
    except OSError:
        parts.append("nonet")
    parts.append(socket.gethostname())
    return ":".join(parts)


JOIN_REPORT_S = float(os.environ.get("INTERLINK_JOIN_REPORT_S", "10"))


def wait_for_ranks(store: Any, prefix: str, rank: int, world: int, timeout: float) -> None:
    """Wait until every rank has set ``{prefix}/{r}``, saying every JOIN_REPORT_S seconds who has joined
    and who is still missing; CommTimeoutError naming the missing ranks after ``timeout``."""
    keys = [f"{prefix}/{r}" for r in range(world)]
    start = time.monotonic()
    while True:
        left = timeout - (time.monotonic() - start)
        try:
            store.wait(keys, max(0.0, min(left, JOIN_REPORT_S)))
            return
        except CommTimeoutError:
            missing = sorted(int(k.rsplit("/", 1)[1]) for k in store.missing(keys))
            if not missing:
                return
            waited = time.monotonic() - start
            joined = world - len(missing)
            if waited >= timeout:
                raise CommTimeoutError(
                    f"rank {rank}: ranks {missing} never joined ({joined} of {world} joined within {timeout:g}s); "
                    f"was every rank started, with the same MASTER_ADDR/MASTER_PORT/WORLD_SIZE?",
                    op="init", group="world", seq=0, ranks=missing) from None
            log.warning("interlink rank %d: waiting for ranks %s to join (%d of %d joined after %.0fs; "
                        "giving up after %gs)", rank, missing, joined, world, waited, timeout)


def _iface_addr(ifname: str) -> str:
    import fcntl
    import struct

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", ifname[:15].encode()))  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    except OSError as e:
        raise ValueError(f"INTERLINK_IFNAME={ifname}: no IPv4 address on that interface ({e})") from None
    finally:
        s.close()


def bind_address(master_addr: str, master_port: int) -> str:
    """The address other ranks reach this one at: INTERLINK_IFNAME's address, else the local
    address of the route toward the master (no packet is sent)."""
    ifname = os.environ.get("INTERLINK_IFNAME")
    if ifname:
        return _iface_addr(ifname)
    try:
        infos = socket.getaddrinfo(master_addr, master_port, socket.AF_INET, socket.SOCK_DGRAM)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.connect(infos[0][4])
            return s.getsockname()[0]
        finally:
            s.close()
    except OSError:
        return "127.0.0.1"


def build_mesh(rank: int, world: int, store: Any, secret: bytes, master_addr: str, master_port: int,
               timeout: float, force_tcp: bool = False) -> Engine:
    """Connect this rank to every other rank; returns the Engine holding the channels."""
    if world == 1:
        eng = Engine(rank, {}, {})
        eng.hosts = [host_identity()]
        return eng
    jobtag = hashlib.sha256(secret + str(master_port).encode()).hexdigest()[:16]
    host = host_identity()
    ip = bind_address(master_addr, master_port)
    tcp_l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp_l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp_l.bind((ip, 0))
    tcp_l.listen(max(16, 2 * world))
    unix_name = f"\0interlink-{jobtag}-{rank}-{os.getpid()}"
    unix_l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_l.bind(unix_name)
    unix_l.listen(max(16, world))
    me = {"host": host, "tcp": [ip, tcp_l.getsockname()[1]], "unix": unix_name[1:]}
    store.set(f"mesh/{rank}", json.dumps(me).encode())
    wait_for_ranks(store, "mesh", rank, world, timeout)
    infos = [json.loads(store.get(f"mesh/{r}", timeout=timeout)) if r != rank else me for r in range(world)]
    local = {r for r in range(world) if r != rank and infos[r]["host"] == host and not force_tcp}

    channels: dict[int, Any] = {}
    controls: dict[int, socket.socket] = {}
    expected: dict[tuple[int, str], bool] = {}
    for j in range(rank + 1, world):
        if j in local:
            expected[(j, "shm")] = False
        else:
            expected[(j, "ctrl")] = False
            expected[(j, "data")] = False
    lock = threading.Lock()
    errors: list[BaseException] = []
    deadline = time.monotonic() + timeout

    def attach(j: int, purpose: str, sock: socket.socket, i_am_low: bool) -> None:
        """An authenticated connection to rank j becomes its channel and/or control socket."""
        if purpose == "shm":
            channels[j] = ShmChannel.create(j, sock, i_am_low=i_am_low)
            controls[j] = sock
        elif purpose == "ctrl":
            controls[j] = sock
        sock.settimeout(None)  # blocking until the Engine takes over
        if purpose == "data":
            channels[j] = TcpChannel(j, sock)  # non-blocking from here on

    def admit(conn: socket.socket, left: float) -> None:
        conn.settimeout(max(1.0, min(30.0, left)))
        try:
            hello = json.loads(authenticate_server(conn, secret, timeout=min(10.0, max(1.0, left)),
                                                   hello=str(rank).encode()))
            j, purpose = int(hello["rank"]), str(hello["purpose"])
            with lock:
                if (j, purpose) not in expected or expected[(j, purpose)] is not False:
                    raise AuthenticationError(f"unexpected connection {hello}")
                expected[(j, purpose)] = None  # claimed: a second claim is refused
            try:
                attach(j, purpose, conn, True)
            except BaseException:
                with lock:
                    expected[(j, purpose)] = False
                raise
            with lock:
                expected[(j, purpose)] = True
        except (AuthenticationError, ValueError, KeyError, OSError) as e:
            log.warning("interlink: rank %d refused a connection: %s", rank, e)
            conn.close()
        except BaseException as e:  # pragma: no cover - reported by the caller
            with lock:
                errors.append(e)
            conn.close()

    def accept_loop() -> None:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(tcp_l, selectors.EVENT_READ)
        sel.register(unix_l, selectors.EVENT_READ)
        try:
            while not all(v is True for v in expected.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                for key, _ in sel.select(min(left, 0.5)):
                    conn, _addr = key.fileobj.accept()  # type: ignore[union-attr]
                    # each connection proves itself on its own thread: a stranger that connects and
                    # never answers must not hold up the peers behind it
                    threading.Thread(target=admit, args=(conn, left), daemon=True,
                                     name=f"interlink-admit-{rank}").start()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            sel.close()

    t = threading.Thread(target=accept_loop, name="interlink-accept", daemon=True)
    t.start()
    try:
        for j in range(rank):
            info = infos[j]
            purposes = ["shm"] if j in local else ["ctrl", "data"]
            for purpose in purposes:
                hello = json.dumps({"rank": rank, "purpose": purpose}).encode()
                sock = _connect(info, purpose == "shm", deadline, j)
                authenticate_client(sock, secret, timeout=max(1.0, deadline - time.monotonic()), hello=hello)
                attach(j, purpose, sock, False)
        t.join(max(0.0, deadline - time.monotonic()))
    finally:
        tcp_l.close()
        unix_l.close()
    if errors:
        raise errors[0]
    missing = sorted({j for (j, _p), ok in expected.items() if not ok})
    if missing:
        raise CommTimeoutError(f"rank {rank}: ranks {missing} never connected during init",
                               op="init", group="world", seq=0, ranks=missing)
    log.info("interlink: rank %d connected: shm %s, tcp %s", rank, sorted(local),
             sorted(set(range(world)) - local - {rank}))
    bell = _host_page(rank, local, channels, controls, timeout) if local else None
    eng = Engine(rank, channels, controls, bell=bell)
    # which ranks share a host (what algorithms need to know); with INTERLINK_TRANSPORT=tcp every
    # rank talks TCP, but the hosts are still the hosts
    eng.hosts = [infos[r]["host"] for r in range(world)]
    return eng


def _host_page(rank: int, local: set, channels: dict, controls: dict, timeout: float):
    """The lowest local rank makes the host's doorbell page and passes it to every local peer."""
    members = sorted(local | {rank})
    leader = members[0]
    if rank == leader:
        page, fd = HostPage.create(len(members))
        try:
            for j in sorted(local):
                socket.send_fds(controls[j], [struct.pack("<QQ", len(members), page.fast_max)], [fd])
        finally:
            os.close(fd)
    else:
        sock = controls[leader]
        sock.settimeout(timeout)
        msg, fds, _flags, _addr = socket.recv_fds(sock, 16, 1)
        sock.settimeout(None)
        if len(msg) != 16 or len(fds) != 1:
            raise CommTimeoutError(f"rank {rank}: the host page from rank {leader} did not arrive",
                                   op="init", group="world", seq=0, ranks=[leader])
        try:
            page = HostPage.attach(fds[0], *struct.unpack("<QQ", msg))
        finally:
            os.close(fds[0])
    for j in local:
        channels[j].peer_bell = page.bell(members.index(j))
    bell = page.bell(members.index(rank))
    bell.members = members  # global ranks of this host, in page-index order
    return bell


def _connect(info: dict, unix: bool, deadline: float, peer: int) -> socket.socket:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if unix:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(5.0)
                s.connect("\0" + info["unix"])
            else:
                s = socket.create_connection((info["tcp"][0], int(info["tcp"][1])), timeout=5.0)
            return s
        except OSError as e:
            last = e
            time.sleep(0.05)
    raise CommTimeoutError(f"could not connect to rank {peer} at {info}: {last}", op="init", group="world",
                           seq=0, ranks=[peer])
