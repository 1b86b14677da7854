"""The progress engine: drives posted sends/receives over the channels until they complete.

Operations are keyed by (peer, lane): a pair connected by a transport with lanes (TCP) has one channel
per lane (``lanes[peer]``, lane 0 being ``channels[peer]``), every other pair one. Ops to the same peer on
the same lane in the same direction complete in posting order; everything else runs concurrently.

Waiting spins briefly (a peer on the same host usually answers within microseconds), then yields the
core, then sleeps in ``select`` on every socket that matters: the TCP data sockets of pending ops and the
control socket of every peer. A control socket that closes means the peer died (PeerLostError); an
ABORT frame on it means a peer failed and tells why. A deadline turns into CommTimeoutError naming the
ranks still owed data.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import struct
import threading
import time
from typing import Callable, Iterable, Optional

from ..errors import (
    CollectiveMismatchError,
    CommTimeoutError,
    InterlinkError,
    PeerLostError,
    RankConflictError,
)
from ..transport.base import Channel, HeaderMismatch, MsgHeader, Op, PeerClosed

log = logging.getLogger("interlink")

SPIN = int(os.environ.get("INTERLINK_SPIN", "2000"))
OVERSUB_SPIN = 64
YIELD_AFTER = 16
BELL_TIMEOUT = 0.005  # a sleeping rank still polls the control plane this often
# the longest a wait spins before it sleeps (and reads the control plane): on a loaded core each yield can
# cost the rest of a timeslice, and 2,000 of them took 6-7 s before a rank noticed a peer that had aborted
# (tests/test_runtime_peer_left.py beside three CPU hogs); idle, the spin ends on its count long before this
SPIN_WALL_S = float(os.environ.get("INTERLINK_SPIN_WALL_US", "2000")) * 1e-6
LEFT = "(it left the job: called destroy() or exited, while this rank still waits for it)"
_CTRL_HDR = struct.Struct("<I")


def _frame(info: dict) -> bytes:
    frame = json.dumps(info).encode()
    return _CTRL_HDR.pack(len(frame)) + frame


def describe_sig(sig: str, seq: int, tag: Optional[int] = None) -> str:
    return f"{sig} (seq {seq})" if tag is None else f"{sig} (seq {seq}, tag {tag})"


class Aborted(Exception):
    """Internal: a peer sent ABORT."""

    def __init__(self, peer: int, info: dict) -> None:
        super().__init__(info.get("message", ""))
        self.peer = peer
        self.info = info


_ERRORS = {
    "RankConflictError": RankConflictError,
    "CollectiveMismatchError": CollectiveMismatchError,
    "CommTimeoutError": CommTimeoutError,
    "PeerLostError": PeerLostError,
}


class Engine:
    """Per process: channels to every peer (global ranks) plus their control sockets."""

    def __init__(self, rank: int, channels: dict[int, Channel], controls: dict[int, socket.socket],
                 bell=None, lanes: Optional[dict[int, list[Channel]]] = None) -> None:
        self.rank = rank
        self.bell = bell  # this rank's doorbell on the host page (shared-memory waits), or None
        self.hosts: list[str] = []  # host identity of every global rank
        self.transports: dict[int, str] = {}  # peer -> the name of the transport that connected it
        try:
            ncpu = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # pragma: no cover
            ncpu = os.cpu_count() or 1
        # the ranks that share this host's page (and its cores): they busy-wait on one another
        nlocal = len(bell.members) if bell is not None and bell.members else 1
        # oversubscribed (more local ranks than cores): spinning steals the core the peer needs
        self.ncpu, self.nlocal = ncpu, nlocal
        self.oversub = nlocal > ncpu
        self.spin = min(SPIN, OVERSUB_SPIN) if self.oversub else SPIN
        # spins before each further one yields the core: at once where ranks share cores (a peer that
        # shares this one needs it to publish; 4 ranks on 2 cores, 8 B all_reduce: 68 -> 55 us, 3 ranks
        # 47 -> 35 us; 64 KiB 1.09-1.11x; benchmarks/RESULTS.md)
        self.yield_after = 0 if self.oversub else YIELD_AFTER
        self.channels = channels  # peer -> its channel of lane 0
        # peer -> its channels, one per lane (lane 0 first); a pair without lanes has [channels[peer]]
        self.lanes: dict[int, list[Channel]] = {p: list((lanes or {}).get(p) or [ch]) for p, ch in channels.items()}
        for p, ch in channels.items():
            if self.lanes[p][0] is not ch:
                raise ValueError(f"rank {rank}: lane 0 to rank {p} is not its channel")
        self.nics: list[int] = []  # NICs (addresses) each global rank published at init
        self.controls = controls
        self._ctrl_fd = {s.fileno(): peer for peer, s in controls.items()}
        self._ctrl_buf: dict[int, bytearray] = {peer: bytearray() for peer in controls}
        self.broken: Optional[InterlinkError] = None
        # for the flight recorder (runtime/recorder.py), read only when a dump is written: the ops of the
        # last wait that went to sleep, and (call, round, rounds) of the executor
        self.waiting: Optional[list[Op]] = None
        self.at: Optional[tuple[int, int, int]] = None
        self.trace: Optional[list] = None  # INTERLINK_TRACE: the executor appends each round's phases here
        # INTERLINK_TRACE: while the executor runs a round, a list that gets (kind, peer, lane, bytes, end
        # time) of every op as it completes (the round's transfer per peer and lane); else None
        self.trace_ops: Optional[list] = None
        self.dead: set[int] = set()
        self.departed: set[int] = set()
        self.pongs: dict[int, dict] = {}  # answers to this rank's last probe()
        self.closed: set[int] = set()  # peers whose control connection reached its end (the process is gone)
        # every ABORT read, by the peer that sent it: whichever loop read it (a probe, said_bye, a drain),
        # translate() reports its root cause rather than the EOF or the BYE that follows it
        self.aborts: dict[int, dict] = {}
        # control frames come from the calling thread and from rank 0's store thread (a rank conflict's
        # ABORT): one frame at a time on a socket, so frames never interleave
        self._send_lock = threading.Lock()
        # shrink's frames (runtime/shrink.py: the survivors' agreement), kept for their reader whichever loop
        # read them off the socket
        self.inbox: list[tuple[int, dict]] = []
        for s in controls.values():
            s.setblocking(False)

    # ---- control plane -------------------------------------------------------------------------
    def _read_control(self, peer: int) -> None:
        sock = self.controls[peer]
        buf = self._ctrl_buf[peer]
        eof = False
        while True:
            try:
                data = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                eof = True
                break
            buf += data
        while len(buf) >= 4:
            (n,) = _CTRL_HDR.unpack_from(buf)
            if len(buf) < 4 + n:
                break
            frame = bytes(buf[4:4 + n])
            del buf[:4 + n]
            try:
                info = json.loads(frame)
            except ValueError:
                info = {"message": f"garbled control frame from rank {peer}"}
            if info.get("type") == "abort":
                self.dead.add(peer)
                self.aborts.setdefault(peer, info)
                raise Aborted(peer, info)
            if info.get("type") == "bye":  # clean shutdown: stop watching this peer
                self.departed.add(peer)
                self._ctrl_fd.pop(sock.fileno(), None)
                return
            if info.get("type") == "ping":  # a peer timed out waiting for this rank: say what it waits for
                waiting = [op for op in (self.waiting or ()) if not op.done]  # a finished wait is not one
                self._send_to(peer, _frame({"type": "pong", "rank": self.rank,
                                            "waiting": sorted({int(op.peer) for op in waiting})}))
                continue
            if info.get("type") == "pong":
                self.pongs[peer] = info
                continue
            if info.get("type") == "shrink":  # kept for runtime/shrink.py, whichever loop read it
                self.inbox.append((peer, info))
        if eof:
            self.dead.add(peer)
            self.closed.add(peer)
            self._ctrl_fd.pop(sock.fileno(), None)
            raise PeerClosed(peer, "(process exited or crashed)")

    def poll_controls(self, timeout: float = 0.0, extra_r: Iterable[int] = (), extra_w: Iterable[int] = ()) -> None:
        rl = list(self._ctrl_fd) + list(extra_r)
        wl = list(extra_w)
        if not rl and not wl:
            if timeout > 0:
                time.sleep(timeout)
            return
        try:
            r, _, _ = select.select(rl, wl, [], timeout)
        except InterruptedError:
            return
        first: Optional[Exception] = None
        for fd in r:
            peer = self._ctrl_fd.get(fd)
            if peer is None:
                continue
            try:
                self._read_control(peer)
            except Aborted as e:  # carries the root cause: wins over a bare EOF
                if not isinstance(first, Aborted):
                    first = e
            except PeerClosed as e:
                if first is None:
                    first = e
        if first is not None:
            raise first

    def check_departed(self, peers: Iterable[int]) -> None:
        """PeerClosed for the first of ``peers`` that has left the job cleanly (BYE: it called destroy()
        or its process exited): what this rank still waits for from it will never come."""
        for p in peers:
            if p in self.departed:
                raise PeerClosed(p, LEFT)

    def check_lost(self, peers: Iterable[int]) -> None:
        """The failure of the first of ``peers`` this rank already knows of: Aborted where it sent ABORT,
        PeerClosed where its control connection closed without a BYE or it left the job (check_departed).
        A call that completed although a peer failed right after its part of it (what it had sent had all
        arrived) raises nothing; the next call that waits for that peer raises here."""
        for p in peers:
            if p in self.aborts:
                raise Aborted(p, self.aborts[p])
            if p in self.dead:
                raise PeerClosed(p, "(process exited or crashed)")
            if p in self.departed:
                raise PeerClosed(p, LEFT)

    def heard_to_the_end(self, peer: int, lane: Optional[int] = None) -> bool:
        """Whether a receive from ``peer`` that left the job (BYE) waits for the end of its data connection
        instead of failing at once: where the peer's data travels apart from its control plane and comes
        before that connection's end (TCP: its EOF follows every byte the peer sent, and ``destroy`` ends
        it right after the BYE). Across hosts the BYE can arrive before the peer's last bytes; they are
        then still taken, and the EOF (or ABORT, death, the deadline) ends the wait. Not for a peer that
        died or aborted, nor on shared memory, where a peer's bytes are in place before it says BYE."""
        if peer not in self.departed or peer in self.dead or peer in self.aborts:
            return False
        chs = self.lanes.get(peer) or ()
        picked = chs if lane is None else chs[lane:lane + 1]
        return bool(picked) and all(getattr(ch, "ends_after_data", False) for ch in picked)

    def end_data(self) -> None:
        """After the BYE: end this rank's side of its data connections that have an end (shutdown for
        writing: the peers read every byte sent, then EOF), so a peer still receiving from this rank
        (:meth:`heard_to_the_end`) learns at once that nothing more comes."""
        for chs in self.lanes.values():
            for ch in chs:
                end = getattr(ch, "end_writes", None)
                if end is not None:
                    end()

    def probe(self, peers: Iterable[int], timeout: float = 0.5) -> dict[int, dict]:
        """Ask ``peers`` whether they are alive (a ping on the control plane, answered by a rank that is itself
        waiting in a call, or polling): their answers (what each waits for) within ``timeout`` seconds. A rank
        that does not answer is stopped, hung, dead or busy outside interlink. Used when a call times out, so
        the error blames the rank that holds the job up, not the healthy ones that wait for it too."""
        peers = [p for p in peers if p != self.rank and p in self.controls and p not in self.dead
                 and p not in self.departed]
        self.pongs = {}
        for p in peers:
            self._send_to(p, _frame({"type": "ping", "rank": self.rank}))
        deadline = time.monotonic() + timeout
        while any(p not in self.pongs for p in peers) and time.monotonic() < deadline:
            try:
                self.poll_controls(min(0.01, max(0.0, deadline - time.monotonic())))
            except (Aborted, PeerClosed):
                pass
        return {p: self.pongs[p] for p in peers if p in self.pongs}

    def said_bye(self, peer: int, timeout: float = 0.05) -> bool:
        """Whether ``peer`` left the job cleanly: its BYE read now, or within ``timeout`` (its data channel can
        close before this rank has read the BYE that came first on the control plane)."""
        deadline = time.monotonic() + timeout
        while peer not in self.departed and peer not in self.dead and time.monotonic() < deadline:
            sock = self.controls.get(peer)
            if sock is None:
                break
            try:
                select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
                self._read_control(peer)
            except (Aborted, PeerClosed, OSError, ValueError):
                break
        return peer in self.departed

    def _send_to(self, peer: int, data: bytes) -> None:
        """One control frame to ``peer``, best effort: blocking for at most 0.5 s, errors ignored."""
        sock = self.controls.get(peer)
        if sock is None:
            return
        with self._send_lock:
            try:
                sock.setblocking(True)
                sock.settimeout(0.5)
                sock.sendall(data)
            except OSError:
                pass
            finally:
                try:
                    sock.setblocking(False)
                except OSError:
                    pass

    def send_bye(self) -> None:
        self._send_all(_frame({"type": "bye", "rank": self.rank}))

    def send_abort(self, info: dict) -> None:
        """Tell every live peer that this rank failed (best effort, never blocks for long)."""
        info = dict(info, type="abort", rank=self.rank)
        info.setdefault("origin", self.rank)
        self._send_all(_frame(info))

    def _send_all(self, data: bytes) -> None:
        for peer in list(self.controls):
            if peer not in self.dead and peer not in self.departed:
                self._send_to(peer, data)

    # ---- data plane ----------------------------------------------------------------------------
    def nlanes(self, peer: int) -> int:
        """How many lanes (connections carrying data) this rank has to ``peer``: 1 but for TCP pairs that
        opened several (runtime/policy.py pair_lanes)."""
        got = self.lanes.get(peer)
        return len(got) if got else 1

    def lane_bytes(self) -> dict[int, list[tuple[int, int]]]:
        """Per peer with several lanes, (payload bytes sent, received) on each lane so far."""
        return {p: [(getattr(c, "sent", 0), getattr(c, "received", 0)) for c in chs]
                for p, chs in self.lanes.items() if len(chs) > 1}

    def run(self, ops: list[Op], deadline: float, feed: Optional[Callable[[], list[Op]]] = None) -> None:
        """Progress ops until all complete. Ops to the same peer on the same lane in the same direction
        complete in posting order (FIFO), the rest concurrently. Raises PeerClosed / HeaderMismatch / Aborted /
        TimeoutError(pending peers) for the caller to turn into typed errors."""
        try:
            self._run(list(ops), deadline, feed)
        except PeerClosed as e:
            # a peer that failed first sends ABORT on its control socket, then exits: prefer its
            # reason over the bare EOF of the data connection. The ABORT precedes the EOF in that
            # peer's control stream, so read that stream to its end (bounded) instead of guessing a delay.
            self.drain_control(e.peer, 2.0)
            try:
                self.poll_controls(0.0)
            except Aborted:
                raise
            except PeerClosed:
                pass
            raise

    def wait_any(self, peers: list[int], match: Callable[[MsgHeader], bool], deadline: float) -> int:
        """The first of ``peers`` whose next incoming message ``match``es (a receive from any source),
        without taking it. Raises as run() does: PeerClosed / Aborted, or TimeoutError(peers) at the
        deadline."""
        sleep = 2e-5
        live = list(peers)
        failed: Optional[Exception] = None  # a peer's failure read on the control plane: one more look first
        while True:
            for g in list(live):
                peek = getattr(self.channels[g], "peek_header", None)
                if peek is None:
                    raise NotImplementedError(f"the {self.channels[g].name} channel to rank {g} cannot receive "
                                              "from any source")
                try:
                    h = peek()
                except PeerClosed:
                    # that peer has closed its side (it finished and left): nothing more comes from it, the
                    # others may still send; only when none is left is this receive lost
                    live.remove(g)
                    if not live:
                        if failed is not None:
                            raise failed from None
                        raise
                    continue
                if h is not None and match(h):
                    return g
            if failed is not None:
                raise failed
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(list(peers))
            if self.departed and all(g in self.departed and not self.heard_to_the_end(g) for g in live):
                self.check_departed(live)
            try:
                self.poll_controls(min(sleep, max(0.0, deadline - now)))
            except (Aborted, PeerClosed) as e:
                failed = e  # a peer that sent this message and then failed: the message is here (as in _run)
            sleep = min(sleep * 2, 1e-3)

    def drain_control(self, peer: int, timeout: float) -> None:
        """Read ``peer``'s control stream until its ABORT (raised as Aborted) or its EOF, for at most
        ``timeout`` seconds. Returns quietly on EOF, a clean BYE or when the time is up."""
        sock = self.controls.get(peer)
        if sock is None or peer in self.departed:
            return
        end = time.monotonic() + timeout
        while True:
            try:
                self._read_control(peer)
            except PeerClosed:
                return
            if peer in self.departed:
                return
            left = end - time.monotonic()
            if left <= 0:
                return
            try:
                select.select([sock], [], [], min(left, 0.05))
            except (InterruptedError, OSError, ValueError):
                return

    def _run(self, pending: list[Op], deadline: float, feed: Optional[Callable[[], list[Op]]]) -> None:
        """Progress ``pending`` (and what ``feed`` adds) to completion. A peer's failure read on the control
        plane (Aborted, PeerClosed, a BYE) raises only after one more progress pass leaves work undone: a peer
        that sent its last bytes of this call and then failed or left does not fail a call that has them."""
        self._check_lanes(pending)
        pending = list(pending)
        try:
            self._loop(pending, deadline, feed)
        except (Aborted, PeerClosed):
            if not self._drain_now(pending, feed):
                raise

    def _drain_now(self, pending: list[Op], feed: Optional[Callable[[], list[Op]]]) -> bool:
        """Progress passes over ``pending`` (and what ``feed`` adds) without waiting, until one moves nothing:
        True when all completed."""
        try:
            self._loop(pending, 0.0, feed, drain=True)
        except (PeerClosed, Aborted, OSError):
            return False
        return not pending

    def _loop(self, pending: list[Op], deadline: float, feed: Optional[Callable[[], list[Op]]],
              drain: bool = False) -> None:
        """_run's loop; ``pending`` is updated in place (what is left when it raises or returns). ``drain``
        (_drain_now): a pass that moves nothing ends it (after what ``feed`` adds), no waiting, no polling."""
        lanes = self.lanes
        tops = self.trace_ops
        spins = 0
        sleep = 2e-5
        last_ctrl = t_spin = time.monotonic()
        while pending:
            progressed = False
            blocked: set = set()
            left = []
            for op in pending:
                key = (op.peer, op.lane, op.kind)
                if key in blocked:
                    left.append(op)
                    continue
                before = op.offset
                ch = lanes[op.peer][op.lane]
                done = ch.progress_send(op) if op.kind == "send" else ch.progress_recv(op)
                if done:
                    progressed = True
                    if tops is not None:
                        tops.append((op.kind, op.peer, op.lane, op.data.size, time.perf_counter()))
                else:
                    if op.offset != before:
                        progressed = True
                    blocked.add(key)
                    left.append(op)
            pending[:] = left
            if not pending:
                return
            if progressed:
                spins = 0
                sleep = 2e-5
                now = t_spin = time.monotonic()
                if now - last_ctrl > 0.05 and not drain:  # a long transfer still notices aborts
                    last_ctrl = now
                    self.poll_controls(0.0)
                continue
            if drain:
                more = feed() if feed is not None else None
                if not more:
                    return
                self._check_lanes(more)
                pending.extend(more)
                continue
            spins += 1
            if spins < self.spin:
                if spins > self.yield_after:
                    os.sched_yield()
                    if not spins & 31 and time.monotonic() - t_spin > SPIN_WALL_S:
                        spins = self.spin  # a loaded core: sleep now (SPIN_WALL_S)
                continue
            # sleep
            if feed is not None:
                more = feed()
                if more:
                    self._check_lanes(more)
                    pending.extend(more)
                    continue
            self.waiting = pending
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(sorted({op.peer for op in pending}))
            if self.departed or self.dead:
                self.check_lost(op.peer for op in pending
                                if not (op.kind == "recv" and self.heard_to_the_end(op.peer, op.lane)))
            rfds, wfds = [], []
            for op in pending:
                for fd, _ev in lanes[op.peer][op.lane].wait_fds(op.kind == "send", op.kind == "recv"):
                    (wfds if op.kind == "send" else rfds).append(fd)
            bell = self.bell
            if bell is not None and not rfds and not wfds:
                # only shared-memory work is pending: block on this rank's doorbell
                snap = bell.snapshot()
                bell.set_sleeping(True)
                try:
                    if not self._any_progress(pending):
                        bell.sleep(snap, min(BELL_TIMEOUT, max(0.0, deadline - now)))
                finally:
                    bell.set_sleeping(False)
                if time.monotonic() - last_ctrl > BELL_TIMEOUT:
                    last_ctrl = time.monotonic()
                    self.poll_controls(0.0)
                spins = self.spin - 1  # one more progress pass, then sleep again if idle
                continue
            last_ctrl = now
            self.poll_controls(min(sleep, max(0.0, deadline - now)), rfds, wfds)
            sleep = min(sleep * 2, 1e-3)

    def _check_lanes(self, ops: list[Op]) -> None:
        """ValueError for an op on a lane its peer does not have (before any byte of it moves)."""
        lanes = self.lanes
        for op in ops:
            if op.lane and op.lane >= len(lanes[op.peer]):
                raise ValueError(f"rank {self.rank}: lane {op.lane} to rank {op.peer}, which has "
                                 f"{len(lanes[op.peer])}")

    def _any_progress(self, pending: list[Op]) -> bool:
        """Has anything arrived (or been freed) for the pending ops? Read-only check."""
        for op in pending:
            ch = self.lanes[op.peer][op.lane]
            ready = getattr(ch, "ready", None)
            if ready is None or ready(op):
                return True
        return False

    def close(self) -> None:
        for chs in self.lanes.values():
            for ch in chs:
                ch.close()
        for s in self.controls.values():
            try:
                s.close()
            except OSError:
                pass
        self.channels = {}
        self.lanes = {}
        self.controls = {}
        self._ctrl_fd = {}


def translate(exc: BaseException, *, op: str, group: str, seq: int, rank: int,
              peers_of: Callable[[int], int] = lambda g: g,
              engine: Optional["Engine"] = None) -> InterlinkError:
    """Turn an engine exception into the typed error users see. With the ``engine``: a timed-out call asks the
    ranks it waits for whether they are alive (:meth:`Engine.probe`), so the error names the ones that did not
    answer; a closed channel is read against the peer's control plane, where a BYE says it left the job."""
    probe = engine.probe if engine is not None else None
    if engine is not None and isinstance(exc, PeerClosed) and exc.detail != LEFT and engine.said_bye(exc.peer):
        exc = PeerClosed(exc.peer, LEFT)
    if engine is not None and isinstance(exc, PeerClosed) and engine.aborts:
        # a peer that aborted the job and then left or closed: the abort read before (by a probe, said_bye or
        # a drain that swallowed it) carries the root cause; a rank that left after another's abort, that one's
        peer = exc.peer if exc.peer in engine.aborts else next(iter(engine.aborts))
        exc = Aborted(peer, engine.aborts[peer])
    if isinstance(exc, HeaderMismatch):
        tags = exc.expected.tag if (exc.expected.tag or exc.got.tag) else None  # shown where tags are in use
        return CollectiveMismatchError(
            f"rank {rank} called {describe_sig(exc.expected.sig, exc.expected.seq, tags)} expecting "
            f"{exc.expected.nbytes} bytes from rank {exc.peer}, but rank {exc.peer} sent "
            f"{describe_sig(exc.got.sig, exc.got.seq, None if tags is None else exc.got.tag)} with "
            f"{exc.got.nbytes} bytes" + (f": the tags differ ({exc.expected.tag} != {exc.got.tag})"
                                        if exc.expected.tag != exc.got.tag else ""),
            op=op, group=group, seq=seq, ranks=[rank, exc.peer])
    if isinstance(exc, PeerClosed):
        if exc.detail == LEFT:
            return PeerLostError(f"rank {exc.peer} left the job (called destroy() or exited) while rank {rank} "
                                 f"was in {op} waiting for it", op=op, group=group, seq=seq, ranks=[exc.peer])
        return PeerLostError(f"rank {exc.peer} died or closed its connection while rank {rank} was in {op}",
                             op=op, group=group, seq=seq, ranks=[exc.peer])
    if isinstance(exc, Aborted):
        cls = _ERRORS.get(exc.info.get("error", ""), PeerLostError)
        origin = exc.info.get("origin", exc.peer)
        if cls is RankConflictError:  # nobody failed: the job stops because a rank has two claimants
            return cls(f"rank {origin} stopped the job: {exc.info.get('message', '?')}", op=op, group=group,
                       seq=seq, ranks=exc.info.get("ranks") or [])
        return cls(f"rank {origin} failed and aborted the job: {exc.info.get('message', '?')}",
                   op=op, group=group, seq=seq, ranks=exc.info.get("ranks") or [origin])
    if isinstance(exc, TimeoutError) and exc.args and isinstance(exc.args[0], list):
        pending = exc.args[0]
        if probe is None or not pending:
            return CommTimeoutError(f"rank {rank} timed out in {op} waiting for ranks {pending}",
                                    op=op, group=group, seq=seq, ranks=pending)
        t0 = time.monotonic()
        answers: dict = {}
        ask = list(pending)
        for _hop in range(3):  # follow who the answering ranks wait for: the chain ends at who holds the job up
            got = probe(ask)
            answers.update(got)
            ask = sorted({w for p in got for w in (got[p].get("waiting") or [])
                          if w != rank and w not in answers and w not in pending} - set(ask))
            if not ask:
                break
        asked = set(pending) | {w for p in answers for w in (answers[p].get("waiting") or []) if w != rank}
        silent = sorted(p for p in asked if p not in answers)
        said = []
        if silent:
            said.append(f"{f'rank {silent[0]}' if len(silent) == 1 else f'ranks {silent}'} did not answer within "
                        f"{time.monotonic() - t0:.1f} s (stopped, hung, dead, or busy outside interlink)")
        for p in sorted(answers):
            w = answers[p].get("waiting") or []
            said.append(f"rank {p} answered: alive" + (f", itself waiting for ranks {w}" if w else ""))
        return CommTimeoutError(f"rank {rank} timed out in {op} waiting for ranks {pending}: " + "; ".join(said),
                                op=op, group=group, seq=seq, ranks=silent or pending)
    if isinstance(exc, InterlinkError):
        return exc
    return InterlinkError(f"{type(exc).__name__}: {exc}", op=op, group=group, seq=seq, ranks=[rank])
