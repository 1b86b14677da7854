"""Connecting every pair of ranks over the transport table (transport/registry.py).

Each rank listens on a TCP address and a Unix socket (abstract namespace) and publishes, in the store,
its host identity (identical boot id, network namespace and hostname: ranks that can share memory),
both addresses, its INTERLINK_TRANSPORT and what its transports publish. For each pair both ranks pick
the same transport (registry.select: the first of the table that can connect the pair; by default shm
between ranks of one host, TCP otherwise) and the higher rank dials the connections that transport
names (shm: one Unix socket, the pair's control channel, which carries the memfd of the rings; tcp: a
control and a data connection per lane), which the transport then turns into the pair's channels. A
transport with a ``lane_purpose`` (tcp) opens that connection once per lane: ``policy.pair_lanes`` says
how many (one per NIC where the hosts have several, INTERLINK_IFNAME=eth0,eth1; else INTERLINK_TCP_LANES
or INTERLINK_CHANNELS streams), and lane i is dialled from this rank's NIC i to the peer's NIC i (each
rank listens on, and publishes, every NIC address it was given). Every
connection proves it belongs to the job (HMAC challenge with the job secret) before it is used. The
ranks a host-page transport (shm) connects share one HostPage: its lowest rank makes it and passes it on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time
from typing import Any, Callable, Optional

from ..errors import AuthenticationError, CommTimeoutError, RankConflictError
from ..transport import registry
from ..transport.base import PairSetup
from ..transport.shm import HostPage
from ..transport.wire import Throttled, authenticate_client, authenticate_server
from . import policy
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
CONFLICT_KEY = "mesh/conflict"
_REFUSALS = Throttled(log)


def claim_rank(store: Any, rank: int) -> None:
    """Take ``rank`` in the store (a counter per rank: the first process to add holds it) and say who holds it.
    A second claimant raises :class:`RankConflictError` naming both and marks the job (``mesh/conflict``), which
    the ranks waiting to join read. Needed where the store does not take ranks itself (torch's store under
    the torch backend; interlink's own store refuses a second claimant already, at its first request)."""
    me = f"pid {os.getpid()} on host {socket.gethostname()}"
    n = int(store.add(f"mesh/claim/{rank}", 1))
    if n == 1:
        store.set(f"mesh/who/{rank}", me.encode())
        return
    try:
        first = bytes(store.get(f"mesh/who/{rank}", timeout=5.0)).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - the first claimant may not have said who it is yet
        first = "another process"
    msg = (f"rank {rank} of this job was claimed twice: first by {first}, then by {me}. The job cannot tell which "
           f"is real and stops on every rank. Was rank {rank} started twice, or is another process posing as "
           f"rank {rank}? Start each rank once; give the job its own INTERLINK_SECRET.")
    try:
        store.set(CONFLICT_KEY, msg.encode())
    finally:
        raise RankConflictError(msg, op="init", group="world", seq=0, ranks=[rank])


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
            msg = conflict_message(store)
            if msg is not None:
                raise RankConflictError(msg, op="init", group="world", seq=0) from None
            waited = time.monotonic() - start
            joined = world - len(missing)
            if waited >= timeout:
                raise CommTimeoutError(
                    f"rank {rank}: ranks {missing} never joined ({joined} of {world} joined within {timeout:g}s); "
                    f"was every rank started, with the same MASTER_ADDR/MASTER_PORT/WORLD_SIZE?",
                    op="init", group="world", seq=0, ranks=missing) from None
            log.warning("interlink rank %d: waiting for ranks %s to join (%d of %d joined after %.0fs; "
                        "giving up after %gs)", rank, missing, joined, world, waited, timeout)


def conflict_message(store: Any) -> Optional[str]:
    """Why the job stopped if a rank was claimed twice (the ``mesh/conflict`` mark), else None. interlink's
    own store refuses every request after a conflict: that refusal (RankConflictError) raises here."""
    if store.missing([CONFLICT_KEY]):
        return None
    return bytes(store.get(CONFLICT_KEY, timeout=1.0)).decode("utf-8", "replace")


def raise_if_conflict(store: Any, cause: BaseException) -> None:
    """Raise the job's :class:`RankConflictError` when the store says a rank was claimed twice: a rank that
    failed to reach a peer during init because that peer stopped on the conflict reports the conflict, the
    cause, not the refused connection. A store that cannot be asked leaves ``cause`` to be raised."""
    try:
        msg = conflict_message(store)
    except RankConflictError:
        raise
    except Exception:  # noqa: BLE001 - the store is gone too: the original failure stands
        return
    if msg is not None:
        raise RankConflictError(msg, op="init", group="world", seq=0) from cause


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


def bind_addresses(master_addr: str, master_port: int) -> list[str]:
    """The addresses other ranks reach this one at, one per NIC: those of INTERLINK_IFNAME's interfaces
    (comma-separated, in order: lane i leaves from the i-th), else the local address of the route toward
    the master (no packet is sent)."""
    names = [n.strip() for n in os.environ.get("INTERLINK_IFNAME", "").split(",")]
    if any(names) and not all(names):
        raise ValueError(f"INTERLINK_IFNAME={os.environ.get('INTERLINK_IFNAME')!r}: an empty interface name in the list")
    if any(names):
        if len(set(names)) != len(names):
            raise ValueError(f"INTERLINK_IFNAME={os.environ.get('INTERLINK_IFNAME')!r}: an interface is listed twice")
        addrs = [_iface_addr(n) for n in names]
        if len(set(addrs)) != len(addrs):
            raise ValueError(f"INTERLINK_IFNAME={os.environ.get('INTERLINK_IFNAME')!r}: two interfaces have the same "
                             f"address ({addrs}); lanes need one address per NIC")
        return addrs
    try:
        infos = socket.getaddrinfo(master_addr, master_port, socket.AF_INET, socket.SOCK_DGRAM)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.connect(infos[0][4])
            return [s.getsockname()[0]]
        finally:
            s.close()
    except OSError:
        return ["127.0.0.1"]


def pair_connections(t: Any, me: dict, them: dict) -> tuple[int, tuple[tuple[str, str], ...]]:
    """(lanes, the connections the pair opens for transport ``t``): its ``connections``, plus its
    ``lane_purpose`` connection again for lanes 1 .. L - 1 (named ``purpose#i``), L from the policy."""
    conns = tuple(t.connections)
    lp = getattr(t, "lane_purpose", None)
    if not lp:
        return 1, conns
    lanes = policy.pair_lanes(me, them)
    endpoint = dict(conns)[lp]
    return lanes, conns + tuple((f"{lp}#{i}", endpoint) for i in range(1, lanes))


def build_mesh(rank: int, world: int, store: Any, secret: bytes, master_addr: str, master_port: int,
               timeout: float, transport: Optional[str] = None) -> Engine:
    """Connect this rank to every other rank; returns the Engine holding the channels. ``transport``:
    the transport this rank asks for (a name in the table; None: INTERLINK_TRANSPORT, '' for none)."""
    if world == 1:
        eng = Engine(rank, {}, {})
        eng.hosts = [host_identity()]
        eng.transports = {}
        return eng
    table = registry.transports()
    wants = (os.environ.get("INTERLINK_TRANSPORT", "") if transport is None else transport).strip().lower()
    if wants and wants not in registry.names():
        raise ValueError(f"INTERLINK_TRANSPORT={wants}: no such transport (the table has "
                         f"{', '.join(registry.names())})")
    jobtag = hashlib.sha256(secret + str(master_port).encode()).hexdigest()[:16]
    host = host_identity()
    addrs = bind_addresses(master_addr, master_port)
    lanes_wanted = policy.tcp_lanes(len(addrs))  # a bad INTERLINK_TCP_LANES fails here, before any socket
    tcp_ls: list[socket.socket] = []  # one listener per NIC: lane i of a peer arrives at NIC i
    try:
        for ip in addrs:
            tcp_l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp_ls.append(tcp_l)
            tcp_l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp_l.bind((ip, 0))
            tcp_l.listen(max(socket.SOMAXCONN, (1 + lanes_wanted) * world))
        unix_name = f"\0interlink-{jobtag}-{rank}-{os.getpid()}"
        unix_l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tcp_ls.append(unix_l)
        unix_l.bind(unix_name)
        unix_l.listen(max(socket.SOMAXCONN, world))
    except BaseException:
        for x in tcp_ls:
            x.close()
        raise
    tcp_ls.pop()
    nics = [[ip, tl.getsockname()[1]] for ip, tl in zip(addrs, tcp_ls)]
    me = {"rank": rank, "pid": os.getpid(), "pidns": _pidns(), "uid": os.geteuid(), "host": host, "tcp": nics[0], "nics": nics, "lanes": lanes_wanted, "unix": unix_name[1:],
          "transport": wants, "transports": [t.name for t in table]}
    for t in table:
        extra = t.publish()
        if extra is not None:
            me.setdefault("info", {})[t.name] = extra
    claim_rank(store, rank)
    store.set(f"mesh/{rank}", json.dumps(me).encode())
    wait_for_ranks(store, "mesh", rank, world, timeout)
    infos = [json.loads(store.get(f"mesh/{r}", timeout=timeout)) if r != rank else me for r in range(world)]
    for r, info in enumerate(infos):
        info.setdefault("rank", r)
    try:
        # the transport of every pair this rank is in: both ranks of a pair choose it from the same two records
        chosen = {j: registry.select(infos[min(rank, j)], infos[max(rank, j)], table)
                  for j in range(world) if j != rank}
        members = _page_members(rank, infos, table)
        # per pair: its lanes and the connections it opens (the transport's, plus one per extra lane)
        plan = {j: pair_connections(chosen[j], infos[rank], infos[j]) for j in chosen}
    except BaseException:
        for x in tcp_ls:
            x.close()
        unix_l.close()
        raise
    params = policy.transport_params()

    channels: dict[int, Any] = {}
    lanes: dict[int, list] = {}
    controls: dict[int, socket.socket] = {}
    got: dict[int, dict[str, socket.socket]] = {}
    expected: dict[tuple[int, str], Any] = {}
    for j in range(rank + 1, world):
        for purpose, _endpoint in plan[j][1]:
            expected[(j, f"{chosen[j].name}.{purpose}")] = False
    lock = threading.Lock()
    errors: list[BaseException] = []
    deadline = time.monotonic() + timeout

    def attach(j: int, purpose: str, sock: socket.socket, i_am_low: bool) -> None:
        """An authenticated connection to rank j; once all of the pair's are there, its transport makes
        the channel and names the control socket."""
        t = chosen[j]
        nl, conns = plan[j]
        with lock:
            socks = got.setdefault(j, {})
            socks[purpose] = sock
            complete = all(p in socks for p, _e in conns)
            socks = dict(socks)
        if not complete:
            return
        try:
            pair = PairSetup(rank, j, i_am_low, socks, infos[rank], infos[j], infos[j]["host"] == host, params,
                             lanes=nl)
            ch, ctrl = t.connect(pair)
            chs = [ch] + [t.connect_lane(pair, i) for i in range(1, nl)]
        except BaseException:
            with lock:
                got[j].pop(purpose, None)
            raise
        ctrl.settimeout(None)  # blocking until the Engine takes over
        with lock:
            channels[j] = ch
            lanes[j] = chs
            controls[j] = ctrl

    # an admitted (or refused) connection wakes the accept loop, which then sees whether every expected
    # connection is in; it used to notice only at its next 0.5 s poll, and every init paid up to that
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)

    def wake() -> None:
        try:
            wake_w.send(b"x")
        except OSError:  # the loop is gone (the init ended): nothing to wake
            pass

    def admit(conn: socket.socket, left: float) -> None:
        try:
            _admit(conn, left)
        finally:
            wake()

    def _admit(conn: socket.socket, left: float) -> None:
        conn.settimeout(max(1.0, min(30.0, left)))
        try:
            hello = json.loads(authenticate_server(conn, secret, timeout=min(policy.auth_timeout_s(), max(1.0, left)),
                                                   hello=str(rank).encode()))
            j, key = int(hello["rank"]), str(hello["purpose"])
            if conn.family == socket.AF_UNIX:  # the kernel says who dialled: the rank's published process
                _check_peer(conn, j, infos[j] if 0 <= j < len(infos) else {})
            with lock:
                if (j, key) not in expected or expected[(j, key)] is not False:
                    raise AuthenticationError(f"unexpected connection {hello}")
                expected[(j, key)] = None  # claimed: a second claim is refused
            try:
                attach(j, key.partition(".")[2], conn, True)
            except BaseException:
                with lock:
                    expected[(j, key)] = False
                raise
            with lock:
                expected[(j, key)] = True
        except (AuthenticationError, ValueError, KeyError, OSError) as e:
            _REFUSALS.warning("interlink: rank %d refused a connection: %s", rank, e)
            conn.close()
        except BaseException as e:  # pragma: no cover - reported by the caller
            with lock:
                errors.append(e)
            conn.close()

    def accept_loop() -> None:
        import selectors

        sel = selectors.DefaultSelector()
        for tl in tcp_ls:
            sel.register(tl, selectors.EVENT_READ)
        sel.register(unix_l, selectors.EVENT_READ)
        sel.register(wake_r, selectors.EVENT_READ)
        try:
            while not all(v is True for v in expected.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                for key, _ in sel.select(min(left, 0.5)):
                    if key.fileobj is wake_r:  # a connection was admitted or refused: check again
                        try:
                            wake_r.recv(4096)
                        except OSError:
                            pass
                        continue
                    conn, _addr = key.fileobj.accept()  # type: ignore[union-attr]
                    # each connection proves itself on its own thread: a stranger that connects and
                    # never answers must not hold up the peers behind it
                    threading.Thread(target=admit, args=(conn, left), daemon=True,
                                     name=f"interlink-admit-{rank}").start()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            sel.close()

    def drop() -> None:
        """A failed init leaves no connection open (a pair's lanes, control and dialled sockets)."""
        with lock:
            for chs in lanes.values():
                for ch in chs:
                    ch.close()
            for sock in list(controls.values()) + [x for socks in got.values() for x in socks.values()]:
                try:
                    sock.close()
                except OSError:
                    pass

    t = threading.Thread(target=accept_loop, name="interlink-accept", daemon=True)
    t.start()
    try:
        for j in range(rank):
            tr = chosen[j]
            lp = getattr(tr, "lane_purpose", None)
            for purpose, endpoint in plan[j][1]:
                hello = json.dumps({"rank": rank, "purpose": f"{tr.name}.{purpose}"}).encode()
                lane = (0 if purpose == lp else int(purpose.rpartition("#")[2])
                        if lp and purpose.startswith(f"{lp}#") else None)
                sock = _connect(infos[j], endpoint == "unix", deadline, j,
                                None if lane is None else _lane_route(infos[rank], infos[j], lane),
                                check=lambda err: raise_if_conflict(store, err))
                try:
                    authenticate_client(sock, secret, timeout=max(1.0, deadline - time.monotonic()), hello=hello)
                except BaseException:
                    sock.close()
                    raise
                attach(j, purpose, sock, False)
        t.join(max(0.0, deadline - time.monotonic()))
        if errors:
            raise errors[0]
        missing = sorted({j for (j, _p), ok in expected.items() if not ok})
        if missing:
            raise CommTimeoutError(f"rank {rank}: ranks {missing} never connected during init",
                                   op="init", group="world", seq=0, ranks=missing)
    except BaseException as e:
        drop()
        if isinstance(e, (CommTimeoutError, AuthenticationError, OSError)) and not isinstance(e, RankConflictError):
            raise_if_conflict(store, e)  # a peer that stopped on a second claimant: say so on this rank too
        raise
    finally:
        for x in tcp_ls:
            x.close()
        unix_l.close()
        wake_r.close()
        wake_w.close()
    by_name: dict[str, list[int]] = {}
    for j in sorted(chosen):
        by_name.setdefault(chosen[j].name, []).append(j)
    log.info("interlink: rank %d connected: %s", rank,
             ", ".join(f"{t.name} {by_name.get(t.name, [])}" for t in table if t.name in by_name or
                       t.name in ("shm", "tcp")))
    bell = _host_page(rank, members, channels, controls, timeout) if len(members) > 1 else None
    eng = Engine(rank, channels, controls, bell=bell, lanes=lanes)
    # which ranks share a host (what algorithms need to know); with INTERLINK_TRANSPORT=tcp every
    # rank talks TCP, but the hosts are still the hosts
    eng.hosts = [infos[r]["host"] for r in range(world)]
    eng.transports = {j: chosen[j].name for j in sorted(chosen)}  # peer -> the transport that connected it
    eng.nics = [len(infos[r].get("nics") or [infos[r].get("tcp")]) for r in range(world)]  # NICs of each rank
    lanes_used = sorted({len(v) for v in lanes.values() if len(v) > 1})
    if lanes_used:
        log.info("interlink: rank %d: %s lanes to the TCP peers (NICs here: %s)", rank,
                 "/".join(map(str, lanes_used)), ", ".join(a for a in addrs))
    return eng


def _pidns() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # pragma: no cover
        return 0


def _check_peer(conn: socket.socket, j: int, info: dict) -> None:
    """A Unix-socket connection that says it is rank ``j`` must come from the process rank ``j`` published
    (its pid) and from this user (SO_PEERCRED): on one host no other process passes, secret or not."""
    import struct

    try:
        pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if "pid" in info and info.get("pidns") == _pidns() and pid != int(info["pid"]):
        raise AuthenticationError(f"a connection claiming to be rank {j} comes from pid {pid}, but rank {j} is pid "
                                  f"{info['pid']}")
    if uid != os.geteuid() and uid != int(info.get("uid", uid)):
        raise AuthenticationError(f"a connection claiming to be rank {j} comes from uid {uid}, not this job's user")


def _page_members(rank: int, infos: list[dict], table: tuple) -> list[int]:
    """The ranks that share this rank's host page (itself included, sorted): those connected to it, directly
    or through each other, by a host-page transport (shm). They must all be connected to each other by
    one; every rank of the host computes the same from the same records, so a mix that breaks this (ranks
    of one host asking for different transports) fails on all of them alike."""
    host = infos[rank]["host"]
    same = [r for r in range(len(infos)) if infos[r]["host"] == host]
    paged: dict[int, set[int]] = {r: set() for r in same}
    for x, i in enumerate(same):
        for j in same[x + 1:]:
            if registry.select(infos[i], infos[j], table).host_page:
                paged[i].add(j)
                paged[j].add(i)
    for i in range(len(infos)):  # a host-page transport across hosts would be a broken entry
        if i != rank and infos[i]["host"] != host:
            t = registry.select(infos[min(i, rank)], infos[max(i, rank)], table)
            if t.host_page:
                raise ValueError(f"transport {t.name} shares a host page but connects ranks {rank} and {i}, "
                                 "which are on different hosts")
    seen: set[int] = set()
    for r in same:  # every component of the host's host-page graph must be complete
        if r in seen:
            continue
        comp, todo = {r}, [r]
        while todo:
            for j in paged[todo.pop()]:
                if j not in comp:
                    comp.add(j)
                    todo.append(j)
        seen |= comp
        apart = [(i, j) for i in sorted(comp) for j in sorted(comp) if i < j and j not in paged[i]]
        if apart:
            i, j = apart[0]
            raise ValueError(f"ranks {sorted(comp)} of one host would share a host page, but ranks {i} and {j} "
                             "are not connected by a host-page transport (does INTERLINK_TRANSPORT, or what "
                             "a transport publishes, differ between ranks of this host?)")
    return sorted({rank} | paged[rank])


def _host_page(rank: int, members: list[int], channels: dict, controls: dict, timeout: float):
    """The lowest rank of the page makes the host's doorbell page and passes it to every other member."""
    leader = members[0]
    if rank == leader:
        page = HostPage.share(len(members), policy.fast_max_bytes(), [controls[j] for j in members[1:]],
                              policy.host_page_populate())
    else:
        try:
            page = HostPage.receive(controls[leader], timeout, policy.host_page_populate())
        except (ConnectionError, OSError) as e:
            raise CommTimeoutError(f"rank {rank}: the host page from rank {leader} did not arrive ({e})",
                                   op="init", group="world", seq=0, ranks=[leader]) from None
    for j in members:
        if j != rank:
            channels[j].peer_bell = page.bell(members.index(j))
    bell = page.bell(members.index(rank))
    bell.members = members  # global ranks of this host, in page-index order
    return bell


def _lane_route(me: dict, them: dict, lane: int) -> tuple[Optional[str], tuple[str, int]]:
    """(source address or None, destination) of lane ``lane`` toward the rank that published ``them``:
    from this rank's NIC ``lane`` (modulo its NICs; the kernel's choice when it has one) to the peer's
    NIC ``lane`` (modulo its NICs), so that lane r of a rail-optimised fabric stays on rail r."""
    mine = me.get("nics") or [me["tcp"]]
    theirs = them.get("nics") or [them["tcp"]]
    dst = theirs[lane % len(theirs)]
    src = mine[lane % len(mine)][0] if len(mine) > 1 else None
    return src, (dst[0], int(dst[1]))


def _connect(info: dict, unix: bool, deadline: float, peer: int,
             route: Optional[tuple[Optional[str], tuple[str, int]]] = None,
             check: Optional[Callable[[BaseException], None]] = None) -> socket.socket:
    """A connection to ``peer``, retried until ``deadline``; ``check(error)`` runs every second of refusals
    (it raises when the job has stopped for a reason the store knows, e.g. a rank claimed twice)."""
    last: Exception | None = None
    checked = time.monotonic()
    while time.monotonic() < deadline:
        if check is not None and last is not None and time.monotonic() - checked >= 1.0:
            checked = time.monotonic()
            check(last)
        s = None
        try:
            if unix:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(5.0)
                s.connect("\0" + info["unix"])
            elif route is not None:
                src, dst = route
                s = socket.create_connection(dst, timeout=5.0, source_address=None if src is None else (src, 0))
            else:
                s = socket.create_connection((info["tcp"][0], int(info["tcp"][1])), timeout=5.0)
            return s
        except OSError as e:
            if s is not None:
                s.close()
            last = e
            time.sleep(0.05)
    where = (f"lane from {route[0] or 'the routed address'} to {route[1][0]}:{route[1][1]}" if route is not None
             else f"{info}")
    raise CommTimeoutError(f"could not connect to rank {peer} ({where}): {last}", op="init", group="world",
                           seq=0, ranks=[peer])
