"""Shrink: the ranks that survive a lost rank go on as a new, smaller communicator.

``Group.shrink(exclude=[...])`` (every rank of the group but the excluded ones calls it) or, after a
:class:`~interlink.errors.PeerLostError`, ``Group.shrink()`` (the survivors agree on who is gone) returns
a new group of the survivors, ranked 0 .. n-1 in the order of their old ranks. Nothing of the old
communicator is reused for data:

1. **This rank's old calls end.** A failed communicator is already marked broken (a queued call raises
   at once); shrink waits until this rank's runner has nothing in flight.
2. **Agreement, on the old control connections** (authenticated at init, one per pair, never carrying
   collective data). Each survivor proposes the ranks it knows are lost (the excluded ones, and every
   peer whose control connection reached its end or said goodbye), sends its proposal to the peers not in
   it and waits for a proposal from every peer it does not yet know lost: a peer that never proposes and
   whose connection ends is lost too. The union of the proposals is the lost set. Each survivor then
   sends the union it computed to every other survivor and checks that all are equal (a rank lost during
   the agreement makes them differ, or leaves a survivor's confirmation missing): a failure raises
   :class:`PeerLostError` (or :class:`CommTimeoutError` naming the ranks that never joined), and every
   survivor that got further is told to stop (a "fail" frame), so all raise. Frames carry an epoch (the
   count of agreements on this communicator), so a retry does not read an earlier attempt's frames.
3. **A new mesh among the survivors**, built by :func:`~.mesh.build_mesh` exactly as at init (every
   transport, lanes, a new host page for each host's survivors, new memfd rings), over a small store
   (:class:`ExchangeStore`) whose keys travel on the same old control connections: no store server is
   needed, so the death of rank 0 (which hosts the rendezvous store) does not matter. Its job secret is
   derived from the old one (HMAC over the epoch and the survivors), so no secret travels. A last
   exchange (every survivor has its mesh) ends it.
4. **The old communicator closes** when the group shrunk was its whole world: its runner, channels
   (mappings of the old rings and host page go with their last view), control sockets, store client and,
   on the rank that ran it, the store server. Its groups stay unusable (they raise, saying the
   communicator was shrunk). Shrinking a subgroup leaves the old communicator to its owner.

What is lost: the lost rank's contribution to the call that failed, and that call's result on the
survivors (undefined: some may have completed it, others not): redo it, e.g. from a state the survivors
agree on (torchft broadcasts it from one survivor). What is not: every survivor's data and the order of
its calls from the shrink on.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import select
import time
from typing import Any, Iterable, Optional, Sequence

from ..errors import CommTimeoutError, InterlinkError, PeerLostError, UnsupportedError
from ..transport.base import PeerClosed
from .engine import Aborted, _frame

log = logging.getLogger("interlink")

TYPE = "shrink"
SEND_TIMEOUT = 2.0  # a frame to a live peer never waits longer (frames are small; a dead one fails at once)


class _Wire:
    """Frames of one shrink attempt among the members of the old communicator, carried on its engine's
    control sockets (read through the engine, which keeps frames of this kind in its inbox)."""

    def __init__(self, ctx: Any, members: Sequence[int], epoch: int) -> None:
        self.eng = ctx.engine
        self.me = ctx.rank
        self.peers = [m for m in members if m != ctx.rank]
        self.epoch = epoch
        self.got: dict[tuple[str, int], dict] = {}
        self.failed: Optional[tuple[int, dict]] = None  # (peer, its "fail" frame): a peer gave this attempt up
        self.lost: set[int] = set()
        self._note_lost()
        self._take()

    def _note_lost(self) -> None:
        eng = self.eng
        for p in self.peers:
            if p in eng.closed or p in eng.departed or p not in eng.controls:
                self.lost.add(p)

    def send(self, peers: Iterable[int], kind: str, **body: Any) -> None:
        data = _frame(dict(body, type=TYPE, kind=kind, epoch=self.epoch, rank=self.me))
        for p in peers:
            if p in self.lost or p == self.me:
                continue
            sock = self.eng.controls.get(p)
            if sock is None:
                self.lost.add(p)
                continue
            try:
                sock.setblocking(True)
                sock.settimeout(SEND_TIMEOUT)
                sock.sendall(data)
            except OSError:
                self.lost.add(p)  # its end is gone (EPIPE, ECONNRESET) or it stopped reading
            finally:
                try:
                    sock.setblocking(False)
                except OSError:
                    pass

    def _take(self) -> None:
        """Move this attempt's frames from the engine's inbox here; later attempts' stay there."""
        keep = []
        for peer, info in self.eng.inbox:
            e = info.get("epoch")
            if info.get("type") != TYPE or (isinstance(e, int) and e > self.epoch):
                keep.append((peer, info))
            elif e == self.epoch:
                kind = str(info.get("kind"))
                if kind == "fail":
                    if self.failed is None:
                        self.failed = (peer, info)
                elif kind == "kv":
                    self.got[(f"kv:{info.get('key')}", peer)] = info
                else:
                    self.got[(kind, peer)] = info
        self.eng.inbox[:] = keep

    def pump(self, timeout: float) -> None:
        """Read what the live peers sent, waiting up to ``timeout`` for something to arrive."""
        eng = self.eng
        fds = {}
        for p in self.peers:
            sock = eng.controls.get(p)
            if p not in self.lost and sock is not None:
                fds[sock.fileno()] = p
        if not fds:
            time.sleep(max(0.0, min(timeout, 0.01)))
            return
        try:
            ready, _, _ = select.select(list(fds), [], [], max(0.0, timeout))
        except (InterruptedError, OSError, ValueError):
            ready = []
        for fd in ready:
            p = fds[fd]
            for _ in range(10000):  # an ABORT frame raises mid-buffer: read on until the buffer is parsed
                try:
                    eng._read_control(p)
                    break
                except Aborted:
                    continue
                except PeerClosed:
                    self.lost.add(p)
                    break
            if p in eng.departed:
                self.lost.add(p)
        self._take()

    def give_up(self, err: BaseException) -> None:
        """Tell every live peer that this attempt failed here and why (they raise the same instead of waiting)."""
        msg = getattr(err, "message", None) or str(err) or type(err).__name__
        self.send(self.peers, "fail", message=msg.splitlines()[0], error=type(err).__name__,
                  ranks=list(getattr(err, "ranks", ()) or ()))

    def check_failed(self, op: str, group: str) -> None:
        if self.failed is not None:
            peer, info = self.failed
            cls = {"CommTimeoutError": CommTimeoutError, "PeerLostError": PeerLostError}.get(info.get("error"),
                                                                                          InterlinkError)
            raise cls(f"rank {self.me}: rank {peer} gave the {op} up: {info.get('message', '?')}", op=op, group=group,
                      seq=self.epoch, ranks=info.get("ranks") or [peer])


def _drain(ctx: Any, deadline: float, op: str, group: str) -> None:
    """Wait until this rank has no call in flight on the old communicator (a broken one fails queued
    calls at once)."""
    r = ctx.runner
    if r.on_runner():
        raise RuntimeError(f"{op} cannot run on interlink's runner thread (inside a completion callback)")
    with r._cv:
        while r._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CommTimeoutError(f"rank {ctx.rank}: {r._pending} call(s) of this rank are still in flight on "
                                       f"{group}; {op} needs them ended", op=op, group=group, seq=0,
                                       ranks=[ctx.rank])
            r._cv.wait(min(left, 0.05))


def agree(ctx: Any, members: Sequence[int], exclude: Optional[Iterable[int]], timeout: float, group: str,
          op: str = "shrink") -> tuple[list[int], _Wire]:
    """The ranks of ``members`` (global ranks of ``ctx``) that every survivor agrees are lost, and the wire
    of this attempt (for the mesh that follows). ``exclude``: ranks this rank proposes besides those it
    knows lost."""
    deadline = time.monotonic() + timeout
    _drain(ctx, deadline, op, group)
    ctx.shrinks += 1
    wire = _Wire(ctx, members, ctx.shrinks)
    try:
        return _agree(wire, members, exclude, deadline, timeout, group, op), wire
    except BaseException as e:
        wire.give_up(e)
        raise


def _agree(wire: _Wire, members: Sequence[int], exclude: Optional[Iterable[int]], deadline: float,
           timeout: float, group: str, op: str) -> list[int]:
    me = wire.me
    mine = set(wire.lost) | {int(x) for x in (exclude or ())}
    wire.send([p for p in wire.peers if p not in mine], "propose", lost=sorted(mine))
    union = set(mine)
    heard: set[int] = set()
    while True:  # phase 1: a proposal from every peer not known lost
        wire.check_failed(op, group)
        for p in wire.peers:
            got = wire.got.get(("propose", p))
            if got is not None and p not in heard:
                heard.add(p)
                union |= {int(x) for x in got.get("lost", ())}
        union |= {p for p in wire.lost if p not in heard}  # gone before it proposed
        waiting = [p for p in wire.peers if p not in union and p not in heard]
        if not waiting:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            raise CommTimeoutError(f"rank {me}: ranks {waiting} did not join the {op} within {timeout:g}s (every "
                                   "rank of the group that is not excluded must call it)", op=op, group=group,
                                   seq=wire.epoch, ranks=waiting)
        wire.pump(min(left, 0.05))
    if me in union:
        raise PeerLostError(f"rank {me} is itself among the ranks the others count lost ({sorted(union)}): an "
                            "excluded rank must not call shrink", op=op, group=group, seq=wire.epoch, ranks=[me])
    survivors = [p for p in wire.peers if p not in union]
    wire.send(survivors, "commit", lost=sorted(union))
    while True:  # phase 2: every survivor computed the same union
        wire.check_failed(op, group)
        for p in survivors:
            got = wire.got.get(("commit", p))
            if got is not None and {int(x) for x in got.get("lost", ())} != union:
                theirs = sorted(int(x) for x in got.get("lost", ()))
                raise PeerLostError(f"rank {me}: the survivors disagree on who is lost (rank {me}: {sorted(union)}, "
                                    f"rank {p}: {theirs}): a rank was lost during the agreement; call {op} again",
                                    op=op, group=group, seq=wire.epoch, ranks=sorted(union ^ set(theirs)))
        missing = [p for p in survivors if ("commit", p) not in wire.got]
        if not missing:
            return sorted(union)
        gone = [p for p in missing if p in wire.lost]
        if gone:
            raise PeerLostError(f"rank {me}: ranks {gone} were lost during the {op}'s agreement; call {op} again",
                                op=op, group=group, seq=wire.epoch, ranks=gone)
        left = deadline - time.monotonic()
        if left <= 0:
            raise CommTimeoutError(f"rank {me}: ranks {missing} did not confirm the {op} within {timeout:g}s",
                                   op=op, group=group, seq=wire.epoch, ranks=missing)
        wire.pump(min(left, 0.05))


class ExchangeStore:
    """The calls build_mesh makes of a store (set/get/wait/missing), served by the survivors themselves: a
    set is sent to every other survivor over the old control connections, a wait reads them until the keys
    are there. A key ``prefix/i`` is survivor i's (new rank): its owner's loss fails a wait for it at once."""

    def __init__(self, wire: _Wire, survivors: Sequence[int], op: str, group: str) -> None:
        self.wire = wire
        self.survivors = list(survivors)  # old global ranks, in new-rank order
        self.kv: dict[str, bytes] = {}
        self.op, self.group = op, group
        self.timeout = 60.0

    def _collect(self) -> None:
        for (k, _p), info in self.wire.got.items():
            if k.startswith("kv:") and k[3:] not in self.kv:
                self.kv[k[3:]] = base64.b64decode(info.get("value", ""))

    def set(self, key: str, value: Any) -> None:
        v = value.encode() if isinstance(value, str) else bytes(value)
        self.kv[key] = v
        self.wire.send([p for p in self.survivors if p != self.wire.me], "kv", key=key,
                       value=base64.b64encode(v).decode())

    def _owner(self, key: str) -> Optional[int]:
        try:
            i = int(key.rsplit("/", 1)[1])
        except (IndexError, ValueError):
            return None
        return self.survivors[i] if 0 <= i < len(self.survivors) else None

    def missing(self, keys: Any) -> list:
        self._collect()
        ks = [keys] if isinstance(keys, str) else list(keys)
        return [k for k in ks if k not in self.kv]

    def wait(self, keys: Any, timeout: Optional[float] = None) -> None:
        wire = self.wire
        t = self.timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + t
        while True:
            missing = self.missing(keys)
            if not missing:
                return
            wire.check_failed(self.op, self.group)
            owners = {self._owner(k) for k in missing}
            gone = sorted(p for p in wire.lost if p in self.survivors and (None in owners or p in owners))
            if gone:
                raise PeerLostError(f"rank {wire.me}: ranks {gone} were lost while the survivors connected; call "
                                    f"{self.op} again", op=self.op, group=self.group, seq=wire.epoch, ranks=gone)
            left = deadline - time.monotonic()
            if left <= 0:
                raise CommTimeoutError(f"rank {wire.me}: timed out after {t:g}s waiting for {missing} from the other "
                                       "survivors", op=self.op, group=self.group, seq=wire.epoch,
                                       ranks=sorted(o for o in owners if o is not None))
            wire.pump(min(left, 0.05))

    def get(self, key: str, timeout: Optional[float] = None) -> bytes:
        self.wait([key], timeout)
        return self.kv[key]

    def add(self, key: str, delta: int = 1) -> int:
        """A counter of this rank's own: the mesh's rank claim (``mesh/claim/i``, added to by survivor i only:
        the agreement gave each survivor its rank, so no second claimant exists)."""
        n = int.from_bytes(self.kv.get(key, b""), "little", signed=True) + int(delta)
        self.kv[key] = n.to_bytes(8, "little", signed=True)
        return n

    def close(self) -> None:
        pass


class NoStore:
    """The store of a shrunk communicator: none (no rank runs a store server any more). destroy()'s goodbye
    keys need none: each rank leaves with a goodbye frame on its control connections."""

    def set(self, key: str, value: Any) -> None:
        pass

    def wait(self, keys: Any, timeout: Optional[float] = None) -> None:
        pass

    def get(self, key: str, timeout: Optional[float] = None) -> bytes:
        raise UnsupportedError(f"a shrunk communicator has no store (key {key!r})")

    def missing(self, keys: Any) -> list:
        return []

    def add(self, key: str, delta: int = 1) -> int:
        raise UnsupportedError("a shrunk communicator has no store")

    def close(self) -> None:
        pass


def _secret(secret: bytes, epoch: int, members: Sequence[int], survivors: Sequence[int]) -> bytes:
    msg = json.dumps(["interlink shrink", epoch, list(members), list(survivors)]).encode()
    return hmac.new(secret, msg, hashlib.sha256).digest()


def lost_ranks(group: Any, timeout: Optional[float] = None) -> list[int]:
    """The group ranks of ``group`` that its survivors agree are lost (every survivor calls it; after a
    PeerLostError). Agreement only: the group stays as it is (broken); pass the result to shrink."""
    ctx = group.ctx
    t = float(timeout if timeout is not None else ctx.timeout)
    lost, _wire = agree(ctx, list(group.ranks), None, t, group.name, "lost_ranks")
    return sorted(group.ranks.index(g) for g in lost)


def shrink(group: Any, exclude: Optional[Iterable[int]] = None, timeout: Optional[float] = None) -> Any:
    """The survivors of ``group`` as a new communicator's world (see the module's docstring)."""
    from .fastpath import FastPath
    from .group import Group, _Ctx, run_p2p_batch
    from .mesh import build_mesh
    from .work import Runner

    ctx = group.ctx
    if group.rank < 0:
        raise ValueError(f"rank {ctx.rank} is not a member of group {group.name} {list(group.ranks)}")
    if ctx.mesh_args is None:
        raise UnsupportedError("this communicator was not made by init (no mesh settings to connect again)")
    t = float(timeout if timeout is not None else ctx.timeout)
    explicit = None
    if exclude is not None:
        ex = [int(x) for x in exclude]
        if not ex or len(set(ex)) != len(ex) or any(not 0 <= x < group.size for x in ex):
            raise ValueError(f"shrink: exclude={ex} must be distinct ranks of {group.name} in [0, {group.size})")
        if group.rank in ex:
            raise ValueError(f"shrink: rank {group.rank} of {group.name} excludes itself (an excluded rank must "
                             "not call shrink)")
        if len(ex) >= group.size:
            raise ValueError("shrink: at least one rank must remain")
        explicit = {group.ranks[x] for x in ex}
    whole = tuple(group.ranks) == tuple(range(ctx.world_size))
    start = time.monotonic()
    if whole and ctx.broken is None:  # this rank's queued calls on the old world fail at once
        ctx.broken = PeerLostError(f"{group.name} is being shrunk", op="shrink", group=group.name, seq=0,
                                   ranks=sorted(explicit or ()))
    members = list(group.ranks)
    lost, wire = agree(ctx, members, explicit, t, group.name)
    try:
        if not lost:
            raise ValueError(f"shrink: no rank of {group.name} is lost (every rank answered); pass exclude=[...] "
                             "to leave live ranks out")
        if explicit is not None and set(lost) != explicit:
            more = sorted(set(lost) - explicit)
            raise PeerLostError(f"shrink: ranks {[group.ranks.index(g) for g in more]} of {group.name} are lost too, "
                                f"besides the excluded {sorted(group.ranks.index(g) for g in explicit)}; exclude them "
                                "as well (or call shrink() without exclude: the survivors agree on who is gone)",
                                op="shrink", group=group.name, seq=wire.epoch,
                                ranks=[group.ranks.index(g) for g in more])
        survivors = [m for m in members if m not in set(lost)]
        me = survivors.index(ctx.rank)
        n = len(survivors)
        secret, addr, port = ctx.mesh_args
        secret2 = _secret(secret, wire.epoch, members, survivors) if secret is not None else None
        store = ExchangeStore(wire, survivors, "shrink", group.name)
        engine = build_mesh(me, n, store, secret2, addr, int(port), max(1.0, min(t, 120.0)))
        try:
            store.set(f"shrunk/{me}", b"1")  # every survivor has its mesh (and its host page) before any call
            store.wait([f"shrunk/{i}" for i in range(n)], t)
            new = _Ctx(me, n, engine, NoStore(), None, ctx.timeout)
            new.mesh_args = (secret2, addr, port)
            if FastPath.usable(engine, n):
                new.fast = FastPath(engine, n)
        except BaseException:
            engine.close()
            raise
    except BaseException as e:
        wire.give_up(e)
        raise
    new.runner = Runner(lambda jobs: run_p2p_batch(new, jobs))
    g = Group(new, range(n), "world")
    g.parent_ranks = tuple(group.ranks.index(m) for m in survivors)  # each new rank's rank in the old group
    g.lost = tuple(group.ranks.index(m) for m in lost)  # the old group's ranks that were left out
    if whole:
        _retire(ctx, group)
        from . import api

        if api._CTX is ctx:  # the module-level calls go to the survivors' world from now on
            api._CTX, api._WORLD = new, g
    log.info("interlink: rank %d: %s shrunk to %d ranks without %s in %.3f s (now rank %d)", ctx.rank, group.name,
             n, g.lost, time.monotonic() - start, me)
    return g


def _retire(ctx: Any, group: Any) -> None:
    """Close the old communicator of a shrunk world: nothing of it stays open (runner thread, channels and
    their mappings, control sockets, store client and server; the host page goes with the last reference to
    the old fast path, which the old group drops here)."""
    name = group.name
    ctx.broken = InterlinkError(f"the communicator of {name} was shrunk: use the group shrink returned",
                                op="shrink", group=name, seq=0)
    group._fast = None
    group._fk = tuple(None for _ in group._fk)
    try:
        ctx.runner.stop()
    except Exception:  # pragma: no cover - best effort
        pass
    ctx.fast = None
    try:
        ctx.engine.close()
    except Exception:  # pragma: no cover
        pass
    try:
        ctx.store.close()
    except Exception:
        pass
    if ctx.server is not None:
        try:
            ctx.server.close(linger=0)
        except Exception:  # pragma: no cover
            pass
        ctx.server = None
