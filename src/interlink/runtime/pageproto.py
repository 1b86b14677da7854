"""The host page's protocol (runtime/fastpath.py's first concern): the words of a slot header, the calls of
the hot path, a cached call shape (Small), and how ranks meet there: agreeing flags at init, publishing a
call, waiting for the peers (spin, then sleep on the doorbell), checking their signatures, announcing
and mapping the ranks' own buffers, and the rounds of a page program.

Two slots per rank alternate by call (their parity), and a call shape's payload rotates through places in
them; a rank writes a place only after every peer has finished reading the calls that used it (the `done`
words: OneShot._need). Each call publishes a header (entry f % HEADERS of the rank's headers) with the
call's group sequence number, a CRC of its signature and its size, so mismatched calls raise
CollectiveMismatchError; a peer that took the regular path instead (e.g. a larger count) is noticed in the
channel rings.
"""

from __future__ import annotations

import itertools
import os
import struct
import time
import zlib
from typing import Any, Optional

import numpy as np

from ..errors import CollectiveMismatchError
from ..transport import shmalloc
from ..transport.base import MsgHeader, PeerClosed
from ..transport.shm import HEADERS
from .engine import BELL_TIMEOUT, SPIN_WALL_S, Aborted, Engine
# a call header (entry f % HEADERS of its rank, transport/shm.py), u64 words: the call number (published last),
# (one unused), group seq, crc, nbytes, the copy into the slot (the compiled core's: low byte 1 plain, 2
# streaming, above it a broadcast root's copy time in ns; Python's pack writes 0: plain, not timed); the
# signature text from byte 48. A slot header (one per parity, the same 192-byte layout): words 16..21: pid, address, arena serial,
# fd, offset and size of the writer's own buffer (the paths that read it in place); word 22: the address
# of the rank's output (the paths that push into it); word 23: the rounds of a page program this rank has
# finished (runtime/pageplan.py: ROUND_STRIDE * call + rounds)
SEQ, GSEQ, CRC, NBYTES, RD = 0, 2, 3, 4, 23
SIG_OFF = 48
SIG_BYTES = 80
DESC = 16
_META = struct.Struct(f"<QQQ8x{SIG_BYTES}s")  # from word 2 on: group seq, crc, nbytes, (the copy: 0), signature
_GC = struct.Struct("<QQ")  # group seq, crc
_CRCS: dict[bytes, int] = {}
_LIDS = itertools.count(1)
_NOMAP: dict = {}


def _crc(sig: bytes) -> int:
    c = _CRCS.get(sig)
    if c is None:
        if len(_CRCS) > 4096:
            _CRCS.clear()
        c = _CRCS[sig] = zlib.crc32(sig)
    return c


# the calls of the hot path
AR, BC, AG, RS, BAR, A2A = range(6)
NAMES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier", "all_to_all")
#: most places per parity a call shape's payload rotates through in the slots (FastPath._rotation): 64, so that
#: a 16-32 KiB payload cycles through 2-4 MiB (both parities), past a reader's L2 (16 places, 0.5-1 MiB, left
#: 2-rank 32-64 KiB calls 12-60% slower where the cores share a cache: benchmarks/RESULTS.md, "The slots' rotation")
MAX_ROTATION = 64
#: most bytes of the host page that the rotation cycles through, all ranks' slots together
ROTATION_BUDGET = 32 << 20


class Small:
    """One cached call shape of the hot path (collective, dtypes, shapes, op or root): its signature and
    the typed views of the slots it reads and writes, made once so that a call does no lookups."""

    __slots__ = ("kind", "sigb", "head", "crc", "nbytes", "sends", "mine", "parts", "stack", "oshape", "fn",
                 "avg", "count", "block", "root", "res", "schedule", "program", "bound", "npos", "push", "tune",
                 "stream", "ccore", "cprog", "lid", "depth")

    def __init__(self, kind: int, sigb: bytes, nbytes: int, sends: bool) -> None:
        self.kind = kind
        self.sigb = sigb  # the flight recorder reads .sigb, like a Plan's
        self.head = sigb[:SIG_BYTES]  # what the slot header shows of it
        self.crc = _crc(sigb)
        self.nbytes = nbytes
        self.sends = sends  # this rank writes its input into its slot
        # the payload's places in the slots: [position] with position = call % npos, its parity
        # position & 1 (rotation: FastPath._rotation)
        self.npos = 2
        self.mine: list = []  # [position] -> this rank's slot as an array of the input's dtype and shape
        self.parts: list = []  # [position] -> the slots (or slices) this rank reduces or copies, rank order
        self.stack: list = []  # [position] -> every rank's slot as one [ranks, count] array
        self.oshape: tuple = ()
        self.fn: Any = None
        self.avg = False
        self.count = 0  # input elements
        self.block = 0  # reduce_scatter: elements per rank
        self.root = 0
        self.res: Optional[list] = None  # [position] -> the shared result slot (all_reduce reduced once)
        self.schedule: Any = None  # the Schedule this call shape runs (algorithms/hostpage.py)
        self.program: Any = None  # peer_buffers: this rank's program of it (runtime/pageplan.py)
        self.bound: dict = {}  # (position, read in place, in place, overlap) -> the program's ops bound
        self.push: Optional[tuple] = None  # a push program's one step, run inlined (FastPath._push_form)
        self.tune: Any = None  # a shape whose path is measured (FastPath.pick): its two Smalls
        self.stream: Optional[bool] = None  # copies stream by the rule (None), always (True), never (False)
        self.ccore: Any = None  # its form for the compiled core (runtime/ccore.py), None: the Python path
        self.cprog: Any = None  # its page program's form for the compiled core (ccore.make_prog), None: Python's
        self.lid = next(_LIDS)  # this shape's number (FastPath.last: the shape of the last call)
        # how many calls back a call of this shape may leave unfinished by its readers (OneShot._need): 2 in
        # general; a small broadcast's root: its payload's places in the slots (npos), at most HEADERS (a
        # call's header is entry f % HEADERS); a call that writes no payload (a broadcast's receiver, a
        # barrier): HEADERS
        self.depth = 2


class PageProtocol:
    """The host page's words as FastPath uses them (a mixin of FastPath: its attributes are set in
    FastPath.__init__)."""

    def _agree(self, flags: int, timeout: float = 60.0) -> int:
        """All local ranks AND a few flag bits through the host page (every rank builds its FastPath at
        init): each writes 1 + flags into its doorbell block and waits for everyone's. Paths must be
        chosen the same on every rank, and whether CMA works is known per pair."""
        W = self.W
        word = self.page.agree_word
        W[word(self.me)] = 1 + flags
        deadline = time.monotonic() + timeout
        while any(W[word(i)] == 0 for i in range(self.n)):
            if time.monotonic() > deadline:
                raise TimeoutError([self.members[i] for i in range(self.n) if W[word(i)] == 0])
            time.sleep(0.0005)
        for i in range(self.n):
            flags &= W[word(i)] - 1
        return flags

    def remember(self, key: tuple, sc: Any) -> Any:
        """Cache a call shape's Small (or False: not for these paths); the cache stays bounded."""
        if len(self.shapes) > 1024:
            self.shapes.clear()
        self.shapes[key] = sc
        return sc

    def _rotation(self, nbytes: int) -> tuple[int, int]:
        """(places per parity, bytes between them) for a payload of nbytes in each rank's slot. A slot line
        written again while a reader's cache still holds it from the last call costs an invalidation per
        line: on a 2-core x86 VM such a copy runs at 6 GB/s, against 40 for a local copy
        (benchmarks/README.md: coherence). So from ``slot_rotation_min_bytes`` up, successive calls of a parity
        put their payload at successive places of the slot (page-aligned), cycling through about
        ``slot_rotation_bytes`` (a reader's L2 size or more): by the time a place comes round again, the
        readers have let its lines go. The place is a function of the call count, the same on every rank."""
        if self.rot_bytes <= 0 or nbytes < max(self.rot_min, 1):
            return 1, 0
        stride = -(-nbytes // 4096) * 4096
        cap = ROTATION_BUDGET // (2 * self.n * stride)  # every rank's slots, both parities, all places
        return max(1, min(MAX_ROTATION, cap, self.page.fast_max // stride, -(-self.rot_bytes // stride))), stride

    @staticmethod
    def usable(engine: Engine, world_size: int) -> bool:
        bell = engine.bell
        return (bell is not None and len(bell.members) == world_size and bell.page.fast_max > 0
                and os.environ.get("INTERLINK_FAST", "1") != "0")

    # ---- waiting ---------------------------------------------------------------------------------
    def _wait(self, ready, laggards, deadline: float, seq: int, sig: bytes) -> None:
        """Spin, then sleep on this rank's doorbell, until ready(); TimeoutError(laggards()) after
        the deadline. Peers ring the doorbell when they publish or finish reading."""
        spins = 0
        last_ctrl = t_spin = time.monotonic()
        while not ready():
            spins += 1
            if spins < self.spin:
                if spins > self.yield_after:
                    os.sched_yield()
                    if not spins & 31 and time.monotonic() - t_spin > SPIN_WALL_S:
                        spins = self.spin  # a loaded core: sleep now (engine.SPIN_WALL_S)
                continue
            self._peek_channels(seq, sig)
            # the flight recorder's view of a sleeping call: the ranks that have not done their part
            self.waiting = (seq, lambda: [self.members[i] for i in laggards()])
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError([self.members[i] for i in laggards()])
            snap = self.bell.snapshot()
            self.bell.set_sleeping(True)
            try:
                if not ready():
                    self.bell.sleep(snap, min(BELL_TIMEOUT, max(0.0, deadline - now)))
            finally:
                self.bell.set_sleeping(False)
            if time.monotonic() - last_ctrl > BELL_TIMEOUT:
                last_ctrl = time.monotonic()
                eng = self.engine
                try:
                    eng.poll_controls(0.0)
                    if eng.departed or eng.dead:
                        eng.check_lost(self.members[i] for i in laggards())
                except (Aborted, PeerClosed):
                    # a peer that published its part of this call and then failed or left: the call has what
                    # it waited for (the next call that waits for that peer raises)
                    if ready():
                        return
                    raise
            spins = self.spin - 1

    def _peek_channels(self, seq: int, sig: bytes) -> None:
        """A peer that took the regular path sends through its channel: a mismatch, not a wait."""
        for i in self.peers:
            g = self.members[i]
            ch = self.engine.channels.get(g)
            got = ch.peek_header() if ch is not None else None
            if got is None:
                continue
            # only a world collective of this or an earlier call is a mismatch: a peer that finished
            # this call may already send for the next one (seq > ours), and point-to-point messages
            # and other groups' collectives share the channel
            if got.seq > seq or got.sig.startswith("p2p ") or "world" not in got.sig.split():
                continue
            from ..transport.base import HeaderMismatch

            raise HeaderMismatch(g, MsgHeader(0, seq, 0, sig.decode(errors="replace") + " (fast path)"), got)

    def _check(self, i: int, q: int, seq: int, crc: int, sig: bytes) -> None:
        """CollectiveMismatchError naming both calls unless rank i's slot holds this call's signature."""
        if _GC.unpack_from(self.page.mm, self.goff[i][q]) == (seq, crc):
            return
        h = self.headers[i][q]
        if int(h[GSEQ]) != seq or int(h[CRC]) != crc:
            g = self.members[i]
            off = self.page.header_offset(i, q) + SIG_OFF
            theirs = bytes(self.page.mm[off:off + SIG_BYTES]).rstrip(b"\0").decode(errors="replace")
            mine = sig.decode(errors="replace")
            raise CollectiveMismatchError(
                f"rank {self.members[self.me]} called {mine} (seq {seq}) but rank {g} sent {theirs} "
                f"(seq {int(h[GSEQ])}, {int(h[NBYTES])} bytes)", op=mine.split(":")[0], group="world",
                seq=seq, ranks=[self.members[self.me], g])

    # ---- one call ---------------------------------------------------------------------------------
    def _all_published(self, f: int, q: int) -> bool:
        W = self.W
        for w in self.peer_w[q]:
            if W[w] < f:
                return False
        return True

    def _set(self, w: int, f: int) -> None:
        """Write control word w (publish, phase 2, done) and wake the peers that sleep."""
        B = self.B
        self.W[w] = f
        for flag, bell in self.wake:
            if B[flag]:
                bell.ring()

    def _gather_headers(self, sc: Small, f: int, q: int, seq: int, timeout: float) -> None:
        """Wait until every peer has published its slot header for call f; check their signatures."""
        W = self.W
        peer_w = self.peer_w[q]
        for pw in peer_w:
            if W[pw] < f:
                self._wait(lambda: self._all_published(f, q),
                           lambda: [i for i, x in zip(self.peers, peer_w) if W[x] < f],
                           time.monotonic() + timeout, seq, sc.sigb)
                break
        self.safe = f - 1  # a peer publishes call f only after finishing call f-1
        crc = sc.crc
        for pw in peer_w:
            if W[pw + GSEQ] != seq or W[pw + CRC] != crc:
                for i in self.peers:
                    self._check(i, q, seq, crc, sc.sigb)

    def _arena(self, sc: Small, flat: np.ndarray, addr: int) -> Optional[tuple[int, int, int, int]]:
        """Where this rank's input lives when it is in an interlink.empty arena the peers may map (only
        where every pair of local ranks may read each other's memory: the same permission), else None."""
        if not sc.sends or not shmalloc._starts or not self.cma:
            return None
        return shmalloc.lookup(addr, flat.nbytes)

    def _announce(self, sc: Small, addr: int, f: int, seq: int,
                  reg: Optional[tuple[int, int, int, int]] = None, dst: int = 0) -> int:
        """Publish this rank's header for call f, with (pid, address) of its input and, when the input
        lives in an interlink.empty arena (reg), where (serial, fd, offset, size): peers then read it in
        place; addr: the input's address; dst: the address peers push into (the descriptors: in the slot
        header of the call's parity). Returns the arena serial (0: not shared)."""
        W = self.W
        mw = self.my_d[f & 1]
        serial = 0
        W[mw + DESC] = self.pids[self.me]
        W[mw + DESC + 6] = dst
        if sc.sends:
            W[mw + DESC + 1] = addr
            if reg is not None:
                serial = reg[0]
                W[mw + DESC + 3], W[mw + DESC + 4], W[mw + DESC + 5] = reg[1], reg[2], reg[3]
        W[mw + DESC + 2] = serial  # 0 from a rank that sends nothing (a broadcast's receivers) too
        h = f % HEADERS
        _META.pack_into(self.page.mm, self.hoff[h], seq, sc.crc, sc.nbytes, sc.head)
        self._set(self.my_w[h], f)  # publish
        return serial

    def _shared_input(self, i: int, q: int, dtype: np.dtype, count: int) -> Optional[np.ndarray]:
        """Rank i's input of this call mapped in place, if it lives in an interlink.empty arena."""
        W = self.W
        w = self.slot_w[i][q] + DESC
        serial = W[w + 2]
        if not serial:
            return None
        try:
            return self.arenas.view(W[w], W[w + 3], serial, W[w + 5], W[w + 4], dtype, count)
        except OSError as e:
            from ..transport.base import PeerClosed

            raise PeerClosed(self.members[i], f"(mapping its interlink.empty buffer failed: {e})") from None

    def _await_readers(self, f: int, seq: int, sc: Small, timeout: float, peers: Optional[list] = None) -> None:
        """A writer whose buffer the peers read in place returns only when every reader is done (a
        reader whose buffer a peer pushes into, when that peer is: peers)."""
        done = self.page.done
        peers = self.peers if peers is None else peers
        if any(int(done[i]) < f for i in peers):
            self._wait(lambda: all(int(done[i]) >= f for i in peers), lambda: [i for i in peers if int(done[i]) < f],
                       time.monotonic() + timeout, seq, sc.sigb)

    def _await_round(self, needs: tuple, q: int, base: int, seq: int, sc: Small, timeout: float) -> None:
        """Wait until every (peer, rounds) of needs has finished that many rounds of this call (pageplan)."""
        W, slot_w = self.W, self.slot_w
        for i, e in needs:
            if W[slot_w[i][q] + RD] < base + e:
                break
        else:
            return
        ws = [(i, slot_w[i][q] + RD, base + e) for i, e in needs]
        if any(W[w] < v for _, w, v in ws):
            self._wait(lambda: all(W[w] >= v for _, w, v in ws), lambda: [i for i, w, v in ws if W[w] < v],
                       time.monotonic() + timeout, seq, sc.sigb)
