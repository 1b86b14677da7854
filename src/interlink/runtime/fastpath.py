"""The shared-memory paths of a group whose ranks all share one host (the world group of such a job).

Every path is a registered Schedule (algorithms/hostpage.py: fast, fast_once, fast2, fastd), verified by
the reference interpreter, priced from its steps by the model and run by the simulator. Two executors
here run them:

- **The one-shot latency path, inlined** (`hot`: `fast` up to 256 KiB, and broadcast, all_gather,
  reduce_scatter and all_to_all through the slots up to policy.fast_inline_max_bytes, 512 KiB; `fast_once`,
  the barrier): every rank writes its payload once into its own slot on the host page and publishes it;
  every reader then takes all ranks' payloads as one strided array (all_to_all: its column of them;
  all_reduce reduces them in rank order, so every rank gets bit-identical results). Its views come from
  the Schedule's form (``hostpage.host_plan`` refuses
  a Schedule of another form). On an oversubscribed host (more than two local ranks a core) the
  all_reduce is reduced once, by the last rank to publish, into a shared result slot that every rank
  copies (_reduce_once).
- **Everything larger runs step by step** (`_program`): `fast` above 512 KiB (broadcast, all_gather,
  reduce_scatter, all_to_all through the slots: the chains walk cache-sized pieces, and a peer's interlink.empty
  input is read in place), `fast2` (the two-phase all_reduce in the slots) and `fastd` (from
  and into the ranks' own buffers, mapped when they live in an interlink.empty arena, else by
  cross-memory attach). Each call shape's Schedule is compiled for this rank by runtime/pageplan.py into
  Moves (a destination chunk and its chain of sources) and PutOps, with the rounds each waits for; ranks
  publish their progress through a word of their slot header.

Two slots per rank alternate by call; a rank reuses a slot only after every peer has finished reading
its previous use (the `done` words). Each slot carries the call's group sequence number, a CRC of its
signature and its size, so mismatched calls raise CollectiveMismatchError; a peer that took the regular
path instead (e.g. a larger count) is noticed in the channel rings.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from typing import Any, Optional

import numpy as np

from ..algorithms import registry
from ..algorithms import hostpath
from ..algorithms.hostpage import host_plan
from ..errors import CollectiveMismatchError
from ..ops import ReduceOp, finish_avg, ufunc
from ..transport import cma, shm, shmalloc, stream
from ..transport.base import MsgHeader
from . import policy
from .engine import BELL_TIMEOUT, Engine
from .pageplan import IN, LOCAL, OUT, ROUND_STRIDE, SCR, PutOp, compile_page

# slot header, u64 words: fast seq (published last), (one unused), group seq, crc, nbytes, (one reserved:
# the header's pack writes it); the signature text from byte 48; words 16..21: pid, address, arena serial,
# fd, offset and size of the writer's own buffer (the paths that read it in place); word 22: the address
# of the rank's output (the paths that push into it); word 23: the rounds of a page program this rank has
# finished (runtime/pageplan.py: ROUND_STRIDE * call + rounds)
SEQ, GSEQ, CRC, NBYTES, RD = 0, 2, 3, 4, 23
SIG_OFF = 48
SIG_BYTES = 80
DESC = 16
_META = struct.Struct(f"<QQQ8x{SIG_BYTES}s")  # from word 2 on: group seq, crc, nbytes, (reserved), signature
_GC = struct.Struct("<QQ")  # group seq, crc
_CRCS: dict[bytes, int] = {}
_OLD = {v: k for k, v in hostpath.ALIASES.items()}  # the paths' registered names
_NEW = hostpath.ALIASES
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
#: most places per parity a call shape's payload rotates through in the slots (FastPath._rotation)
MAX_ROTATION = 16
#: most bytes of the host page that the rotation cycles through, all ranks' slots together
ROTATION_BUDGET = 32 << 20


class Small:
    """One cached call shape of the hot path (collective, dtypes, shapes, op or root): its signature and
    the typed views of the slots it reads and writes, made once so that a call does no lookups."""

    __slots__ = ("kind", "sigb", "head", "crc", "nbytes", "sends", "mine", "parts", "stack", "oshape", "fn",
                 "avg", "count", "block", "root", "res", "schedule", "program", "bound", "npos", "push", "tune",
                 "stream")

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
        self.program: Any = None  # fastd: this rank's program of it (runtime/pageplan.py)
        self.bound: dict = {}  # (position, read in place, in place, overlap) -> the program's ops bound
        self.push: Optional[tuple] = None  # a push program's one step, run inlined (FastPath._push_form)
        self.tune: Optional[Tune] = None  # a shape whose path is measured (FastPath.pick): its two Smalls
        self.stream: Optional[bool] = None  # copies stream by the rule (None), always (True), never (False)


#: the first calls of a measured call shape: PROBE_WARM calls by the limits' path (the user's buffers'
#: first touches), then four blocks of PROBE_BLOCK calls, the paths in turn, the first PROBE_SKIP calls of
#: each block untimed (they find the other path's lines in the caches): 2 ranks, 1.5 MiB all_gather output,
#: a path's first calls after the other's took 1.5-2x its later ones (benchmarks/RESULTS.md)
PROBE_WARM, PROBE_BLOCK, PROBE_SKIP, PROBE_BLOCKS = 2, 8, 2, 4
PROBE_CALLS = PROBE_WARM + PROBE_BLOCKS * PROBE_BLOCK


def probe_path(i: int) -> int:
    """Which path (0: the limits', 1: the other) probe call i of a shape takes."""
    return 0 if i < PROBE_WARM else ((i - PROBE_WARM) // PROBE_BLOCK) & 1


def choose(blocks: list) -> int:
    """The path whose block medians (the median of each block's timed calls) average lower; 0 (the limits')
    on a tie or without timings. Medians per block: a burst of noise moves one block's median, not every
    call's weight. Their mean, not their best: the best of two blocks favours the noisier path (4 ranks,
    broadcast of 16 MiB in compare.py's warm-up: fastd's blocks 2413 and 3171 us, fastp's 2452 and 2777;
    the best block kept fastd, 3184 us a call once timed against fastp's 2478-2551; benchmarks/RESULTS.md). A path's first block can still be warming up (2 ranks, 1 MiB of all_gather output: the
    slots' first block 57-62 us, its second 34-40, fastd 50-61 in both): the mean still takes the slots."""
    meds: list[list[float]] = [[], []]
    for b, ts in enumerate(blocks):
        if len(ts) > 1:
            meds[b & 1].append(float(np.median(ts)))
    if not meds[0] or not meds[1]:
        return 0
    return 1 if sum(meds[1]) / len(meds[1]) < sum(meds[0]) / len(meds[0]) else 0


class TuneState:
    """The measurement of one call signature (shared by its cached shapes: a flat and an N-d array of
    the same call count as one): calls so far, the host's first rank's timings per path, the choice."""

    __slots__ = ("key", "calls", "times", "choice", "last")

    def __init__(self, key: int) -> None:
        self.key = key  # the signature's CRC, non-zero: its entry in the host page's choice table
        self.calls = 0
        self.times: list[list] = [[] for _ in range(PROBE_BLOCKS)]  # the first rank's, per block
        self.choice: Optional[int] = None
        self.last = -1  # the probe call in flight (its index)


class Tune:
    """A cached call shape in the band where both paths are measured: alts[0] the fixed limits' path, alts[1]
    the other, and the signature's shared TuneState."""

    __slots__ = ("alts", "state")

    def __init__(self, alts: tuple, state: TuneState) -> None:
        self.alts = alts
        self.state = state


def _push_form(prog: Any) -> Optional[tuple]:
    """(offset, count, pushes, waits, end) when a rank's page program is one round of one plain copy of its
    input into its output, pushed into every peer's output (the fastd all_gather), with nothing read from
    its buffers, mapped or in the slots: FastPath._push runs it inlined; else None (FastPath._program)."""
    if len(prog.rounds) != 1 or prog.readers or prog.maps or prog.slot_readers or prog.scratch \
            or not prog.out_addr:
        return None
    rnd = prog.rounds[0]
    if rnd.before or rnd.early or len(rnd.ops) != 1 or not rnd.publish or rnd.first != 0:
        return None
    op = rnd.ops[0]
    if isinstance(op, PutOp) or len(op.srcs) != 1 or op.buf != OUT or op.elide or op.hazard or not op.pushes:
        return None
    s = op.srcs[0]
    if s.peer != LOCAL or s.buf != IN or s.reduce or s.off != 0 or set(rnd.waits) != {i for i, _ in op.pushes}:
        return None
    return op.off, op.count, op.pushes, tuple((i, rnd.end) for i in rnd.waits), rnd.end


class FastPath:
    def __init__(self, engine: Engine, world_ranks: int) -> None:
        bell = engine.bell
        self.engine = engine
        self.bell = bell
        self.page = bell.page
        self.me = bell.index
        self.n = self.page.nlocal
        # the limits of the host page's paths (algorithms/hostpath.py, named once; their environment: policy),
        # on this page's slot size; which path a call takes is hostpath.host_path's choice
        self.limits = lim = policy.host_limits().with_slot(self.page.fast_max)
        self.max = lim.oneshot()  # one-shot all_reduce
        # broadcast, all_gather, reduce_scatter and all_to_all through the slots: the inlined executor up to
        # this payload (the same Schedule; above it step by step, runtime/pageplan.py)
        self.inline_max = lim.inline()
        # two-phase all_reduce up to the slot size; on 2 ranks up to where the ranks' own buffers take over
        self.direct_max = lim.two_phase_max(self.n)
        # broadcast, all_gather, reduce_scatter and all_to_all through the slots up to this (without
        # cross-memory attach); all_gather and all_to_all leave them earlier where it works
        self.move_max = lim.slots_max(self.n)
        self.move_max_ag = lim.slots_limit("all_gather", self.n)
        self.move_max_a2a = lim.slots_limit("all_to_all", self.n)
        self.chunk = policy.fast_chunk_bytes()
        self.stream_min = policy.stream_min_bytes()
        self.rot_bytes, self.rot_min = policy.slot_rotation_bytes(), policy.slot_rotation_min_bytes()
        self.cma_piece = 64 * self.chunk  # bytes per cross-memory read or write (8 MiB)
        # a copy whose pieces are pushed into peers' outputs (fastd all_gather) walks 2 MiB at a time: it
        # does no arithmetic to keep in L2, and each piece costs a cross-memory write per peer
        self.push_piece = 16 * self.chunk
        self.f = 0  # fast-path calls so far (the same on every rank)
        self.headers = [[self.page.slot_header(i, q) for q in (0, 1)] for i in range(self.n)]
        self.peers = [i for i in range(self.n) if i != self.me]
        # byte offsets of every rank's (group seq, crc, nbytes) header words, per parity
        page = self.page
        self.goff = [[page.slot_offset(i, q) + 8 * GSEQ for q in (0, 1)] for i in range(self.n)]
        self.hoff = self.goff[self.me]
        self.bells = [self.page.bell(i) for i in self.peers]
        self.members = bell.members
        self.spin = engine.spin
        self.yield_after = engine.yield_after  # spins before each further one yields the core
        self.safe = 0  # every peer is known to have finished reading calls <= safe
        self.waiting: Any = None  # (call, ranks it waits for): set when a call sleeps (runtime/recorder.py)
        # the hot path reads and writes the page's control words as Python ints through memoryviews
        # (20 ns a word, against 70 ns through numpy scalars)
        self.W = page.words64()
        self.B = page.words32()
        slot_w = [[page.slot_word(i, q) for q in (0, 1)] for i in range(self.n)]
        self.my_w = slot_w[self.me]
        self.slot_w = slot_w
        self.peer_w = [[slot_w[i][q] for i in self.peers] for q in (0, 1)]
        self.done_w = page.done_word(self.me)
        self.wake = [(page.sleeping_word(i), b) for i, b in zip(self.peers, self.bells)]  # (sleeping flag, bell)
        self.shapes: dict = {}  # call shape -> Small, or False when the call is not for the hot path
        # larger than that: one copy, every reader takes its part straight from the writer's own buffer
        # by cross-memory attach (process_vm_readv), when every pair of local ranks allows it
        chans = [engine.channels.get(m) for i, m in enumerate(bell.members) if i != self.me]
        self.cma = bool(chans) and all(getattr(c, "cma_ok", False) for c in chans) \
            and os.environ.get("INTERLINK_FAST_CMA", "1") != "0"
        # more than two ranks a core: the one-shot all_reduce is reduced once, for everyone (8 ranks on 2
        # cores, 64 KiB: 227 -> 148 us; 4 ranks: no better); INTERLINK_FAST_REDUCE_ONCE=1/0 forces it
        once = os.environ.get("INTERLINK_FAST_REDUCE_ONCE", "")
        self.once = once == "1" or (once != "0" and engine.nlocal > 2 * engine.ncpu)
        # the slots' rotation (_rotation) where every rank has a core of its own: ranks that share a core
        # share its cache, and rotating then only spreads the calls over more memory (4 ranks on 2 cores,
        # 1 MiB: all_reduce 270 -> 317 us, reduce_scatter 164 -> 192 us)
        # (INTERLINK_SLOT_ROTATE=1/0 forces it on or off)
        force = os.environ.get("INTERLINK_SLOT_ROTATE", "")
        rotate = self.rot_bytes > 0 and (force == "1" or (force != "0" and not engine.oversub))
        agreed = self._agree(int(self.cma) | 2 * int(self.once) | 4 * int(rotate) | 8 * int(policy.autotune()))
        self.cma, self.once = bool(agreed & 1), bool(agreed & 2)
        # all_gather and all_to_all between the slots and fastd: measured per call shape (pick)
        self.autotune = bool(agreed & 8) and self.cma
        # copies into large outputs: streaming stores or plain, measured near stream_min (stream_tuned)
        self.autotune_stream = bool(agreed & 8) and stream.available
        self.tuning: dict[int, TuneState] = {}
        self.pending: dict[int, int] = {}  # the first rank: key -> table entry of a choice not yet read
        if not agreed & 4:
            self.rot_bytes = 0
        self.ready_w = [page.slot_word(self.n, q) for q in (0, 1)]  # [parity] -> the result slot's ready word
        self.pids = [0] * self.n
        for i, c in zip(self.peers, chans):
            self.pids[i] = getattr(c, "peer_pid", 0)
        self.pids[self.me] = os.getpid()
        self._piece: Optional[np.ndarray] = None
        self._stage: Optional[np.ndarray] = None  # _staging
        self.arenas = shmalloc.PeerArenas()
        # all_reduce from the ranks' own buffers (each rank reduces its 1/p slice reading every rank's
        # buffer, then copies the other slices): above this size
        self.ar_direct_min = lim.peer_buffers_all_reduce_min

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

    def takes(self, kind: int, nbytes: int) -> bool:
        """Whether a call with nbytes of input goes through the host page (the slots, or the ranks' own
        buffers), not the channels (hostpath.takes). The same on every rank (size and agreed flags only)."""
        return hostpath.takes(NAMES[kind], nbytes, self.n, self.limits, cma=self.cma)

    def thresholds(self) -> dict[str, int]:
        """The sizes (bytes of a call's input) at which this host's choice of path changes: what `takes`
        and `small` read. The differential tests draw sizes on both sides of each."""
        return {"fast.max": self.max, "fast.inline.max": self.inline_max, "fast2.max": self.direct_max,
                "slots.max": self.move_max,
                "slots.max.all_gather": self.move_max_ag,
                "slots.max.all_to_all": self.move_max_a2a,
                "fastd.all_reduce.min": self.ar_direct_min, "fast.chunk": self.chunk,
                "fastd.piece": 2 * self.chunk, "fastd.cma_piece": 64 * self.chunk,
                "fastd.push_piece": self.push_piece,
                "slots.rotation_min": self.rot_min if self.rot_bytes > 0 else 0,
                # copies stream from here (the host's outputs add up to policy.stream_min_bytes): an input as
                # large as its output (where the slots still take it), and an all_gather's per-rank input
                "stream.min": self._stream_at(self.n),
                "stream.min.all_gather": self._stream_at(self.n ** 2, all_gather=True),
                # the band where the slots and fastd are measured against each other (pick; 0: none)
                "tune.all_gather.lo": self.band(AG)[0], "tune.all_gather.hi": self.band(AG)[1],
                "tune.all_to_all.lo": self.band(A2A)[0], "tune.all_to_all.hi": self.band(A2A)[1]}

    def _stream_at(self, div: int, all_gather: bool = False) -> int:
        """The input bytes from which a call's copies stream (0: never, or beyond any path that streams)."""
        if not stream.available or self.stream_min >= 1 << 61:
            return 0
        at = -(-self.stream_min // div)
        reach = self.move_max if self.n == 2 else self.page.fast_max  # broadcast, fast2: the slots' limit
        return at if all_gather or at <= reach else 0

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
        last_ctrl = time.monotonic()
        while not ready():
            spins += 1
            if spins < self.spin:
                if spins > self.yield_after:
                    os.sched_yield()
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
                self.engine.poll_controls(0.0)
                if self.engine.departed:
                    self.engine.check_departed(self.members[i] for i in laggards())
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
            off = self.page.slot_offset(i, q) + SIG_OFF
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

    def _limit(self, kind: int) -> int:
        """The input bytes above which a broadcast, all_gather, reduce_scatter or all_to_all leaves the slots
        for fastd (hostpath.HostLimits.slots_limit)."""
        return self.limits.slots_limit(NAMES[kind], self.n, self.cma)

    def band(self, kind: int) -> tuple[int, int]:
        """The inputs (lo, hi] for which this host measures the slots against fastd (pick); (0, 0): none. A
        broadcast too large for a slot goes through it in chunks (fastp), up to PIPE_CHUNKS / 2 slots."""
        if not self.autotune or kind not in (AG, A2A, BC):
            return 0, 0
        return self.limits.measured_band(NAMES[kind], self.n, self.cma)

    def host_outputs(self, kind: int, nbytes: int) -> int:
        """The bytes every local rank's output of a call with nbytes of input add up to (what decides
        whether its copies into them stream: policy.stream_min_bytes)."""
        return nbytes * self.n * (self.n if kind == AG else 1) // (self.n if kind == RS else 1)

    def stream_tuned(self, kind: int, nbytes: int) -> bool:
        """Whether a call of this kind and input size measures streaming against plain copies into its
        outputs (policy.stream_band around stream_min; only a Schedule run step by step streams)."""
        if not self.autotune_stream or kind == BAR:
            return False
        lo, hi = policy.stream_band(self.stream_min)
        return lo < self.host_outputs(kind, nbytes) <= hi

    def small(self, kind: int, a: np.ndarray, out: Optional[np.ndarray], op: ReduceOp, root: int,
              group: str, direct: Optional[bool] = None, streams: Optional[bool] = None) -> Small:
        """The cached views of a one-shot call of this shape (the caller validated it and checked that
        the input fits a slot). ``direct``: force fastd (True) or the slots (False); None: the limits
        decide, and within the measured band (``band``) a Small whose ``tune`` holds both. ``streams``:
        force streaming copies into the outputs (True) or plain ones (False); None: the rule
        (stream_min), and within its measured band (``stream_tuned``) a Small whose ``tune`` holds both."""
        count, dt, me = a.size, a.dtype, self.me
        sends = kind != BAR and (kind != BC or root == me)
        if direct is None:
            lo, hi = self.band(kind)
            if lo < a.nbytes <= hi and (out is not None or kind == BC):
                return self._tuned(kind, a, out, op, root, group)
            if streams is None and self.stream_tuned(kind, a.nbytes):
                direct = hostpath.page_path(NAMES[kind], a.nbytes, self.n, self.limits, cma=self.cma,
                                            reduce_once=self.once, itemsize=dt.itemsize) == hostpath.PEER_BUFFERS
                rule = self.small(kind, a, out, op, root, group, direct, None)
                if rule.program is None:  # the inlined executor: numpy's copies only
                    return rule
                ruled = self.host_outputs(kind, a.nbytes) >= self.stream_min
                return self._tuned(kind, a, out, op, root, group,
                                   (rule, self.small(kind, a, out, op, root, group, direct, not ruled)))
        # the path (hostpath.host_path: the limits, or a measured shape's forced side), named in the signature:
        # the flight recorder and `interlink bench` show the registered Schedule it runs
        path = hostpath.page_path(NAMES[kind], a.nbytes, self.n, self.limits, cma=self.cma, reduce_once=self.once,
                                  itemsize=dt.itemsize, direct=direct)
        path = _OLD[path]
        once = path == "fast_once"
        # the inlined executor: the one-shot sizes, and a broadcast, all_gather or reduce_scatter through the
        # slots up to inline_max (the same `fast` Schedule, without the step-by-step executor's per-call cost)
        inline = hostpath.inlined(NAMES[kind], a.nbytes, _NEW[path], self.limits)
        # the call shape's plan comes from its Schedule (checked to be of the form this executor runs)
        # (fast_once: the reducer is whichever rank publishes last; the plan is the Schedule of the last
        # rank, and every reducer's Schedule computes the same bits: tests/test_algorithms_hostpage.py)
        schedule = registry.get_schedule(NAMES[kind], path, self.n,
                                         count // self.n if kind in (RS, A2A) else 0 if kind == BAR else count,
                                         self.n - 1 if once else root)
        # where in its slot each call's payload lies (the Schedule's scratch, or the one-shot's count)
        rot, stride = self._rotation((schedule.buffers.get("scratch", 0) if not inline else count if kind != BAR
                                      else 0) * dt.itemsize)
        # (the rotation is in the signature: ranks whose policy placed the payload differently mismatch)
        sigb = (f"{NAMES[kind]}:{path} {dt} n={count} {op.name.lower()} root={root} {group}"
                + (f" rot={rot}" if rot > 1 else "")).encode()
        sc = Small(kind, sigb, a.nbytes if sends else 0, sends)
        sc.count, sc.root, sc.schedule, sc.npos = count, root, schedule, 2 * rot
        sc.stream = streams
        places = [(pos & 1, (pos >> 1) * stride) for pos in range(sc.npos)]
        if kind in (AR, RS):
            sc.fn = ufunc(ReduceOp.SUM if op is ReduceOp.AVG else op, dt)
            sc.avg = op is ReduceOp.AVG
        sc.block = count // self.n
        if not inline:  # run step by step from the Schedule (runtime/pageplan.py)
            sc.program = prog = compile_page(sc.schedule, me)
            sc.push = _push_form(prog)
            if prog.scratch:  # every rank's slot at each position, [ranks, scratch]
                sc.stack = [self.page.stacked(q, dt, prog.scratch, at) for q, at in places]
            return sc
        # the one-shot latency path, inlined: the views of the slots it reads, from its Schedule's form
        host_plan(sc.schedule, me)
        rows = [self.page.stacked(q, dt, count, at) for q, at in places] if kind != BAR else []
        sc.mine = [r[me].reshape((self.n, count // self.n) if kind == A2A else a.shape) for r in rows]
        if kind == AR:
            sc.parts = [[row.reshape(a.shape) for row in r] for r in rows]
            if once:
                sc.res = [self.page.result(q, dt, count, at).reshape(a.shape) for q, at in places]
        elif kind == BC:
            sc.parts = [[r[root].reshape(a.shape)] for r in rows]
        elif kind == AG:
            sc.stack, sc.oshape = rows, (self.n, count)
        elif kind == RS:
            m = sc.block
            sc.parts = [[row[me * m:(me + 1) * m].reshape(out.shape) for row in r] for r in rows]
        elif kind == A2A:  # row j: block `me` of rank j's slot (what rank j sends this rank)
            m = sc.block
            sc.stack = [r.reshape(self.n, self.n, m)[:, me, :] for r in rows]
        return sc

    # ---- the measured band: the slots or fastd, chosen by the host's first rank's timings ---------------
    def _tuned(self, kind: int, a: np.ndarray, out: Optional[np.ndarray], op: ReduceOp, root: int, group: str,
               alts: Optional[tuple] = None) -> Small:
        """A shape in a measured band: a Small carrying both paths' Smalls (the rule's choice first: the
        limits', or ``alts``: the rule's copies and the other copies into the outputs) and its signature's
        TuneState, shared by every cached shape of that signature (a shape lies in one band only)."""
        if alts is None:
            first = a.nbytes > self._limit(kind)
            alts = (self.small(kind, a, out, op, root, group, first),
                    self.small(kind, a, out, op, root, group, not first))
        key = zlib.crc32(f"{NAMES[kind]} {a.dtype} n={a.size} {op.name} root={root} {group}".encode()) | 1 << 32
        st = self.tuning.get(key)
        if st is None:
            if len(self.tuning) > 4096:  # the same calls on every rank: cleared at the same call everywhere
                self.tuning.clear()
            st = self.tuning[key] = TuneState(key)
        sc = Small(kind, alts[0].sigb, alts[0].nbytes, alts[0].sends)
        sc.tune = Tune(alts, st)
        return sc

    def pick(self, tn: Tune) -> Small:
        """The Small this call of a measured shape runs. The first PROBE_CALLS calls take the two paths in
        blocks, in turn (``probe_path``); at the start of the last of them the host's first rank (local rank 0)
        compares the mean of each path's block medians it measured (``timed``, ``choose``) and writes the faster path into the host page's choice
        table before it publishes that call; at the next call every rank (the first too) reads the table,
        after every rank has seen that publication (every call of the host page waits for every peer's
        header), and
        keeps the choice. Another shape's choice in the same entry (a key that differs) means the limits'
        path, on every rank alike."""
        st = tn.state
        i = st.calls
        st.calls = i + 1
        if st.choice is not None:
            return tn.alts[st.choice]
        if i < PROBE_CALLS:
            if i == PROBE_CALLS - 1 and self.me == 0:
                self._publish_choice(st.key, choose(st.times))
            st.last = i
            return tn.alts[probe_path(i)]
        st.choice = self._read_choice(st.key)
        if self.me == 0:
            self.pending.pop(st.key, None)  # every rank has read it once this rank finishes this call
        return tn.alts[st.choice]

    def _publish_choice(self, key: int, choice: int) -> None:
        """The first rank writes a shape's choice into the table: the first entry from key % entries on
        that no other shape's choice still waits to be read in (``pending``; all waiting: that one, and
        its shape takes the limits' path), the key's older entry cleared (one entry per key)."""
        W, n = self.W, shm.TUNE_ENTRIES
        busy = set(self.pending.values())
        start = key % n
        e = next(((start + k) % n for k in range(n) if (start + k) % n not in busy), start)
        for k in range(n):
            w = self.page.tune_word(k)
            if k != e and W[w] == key:
                W[w] = 0
        w = self.page.tune_word(e)
        W[w + 1] = choice + 1
        W[w] = key
        self.pending[key] = e

    def _read_choice(self, key: int) -> int:
        """A shape's choice from the table (every rank, the first too): 0, the limits' path, where no entry
        holds its key."""
        W, n = self.W, shm.TUNE_ENTRIES
        for k in range(n):
            w = self.page.tune_word((key + k) % n)
            if W[w] == key:
                c = int(W[w + 1]) - 1
                return c if c in (0, 1) else 0
        return 0

    def timed(self, tn: Tune, seconds: float) -> None:
        """The host's first rank notes a probe call's time (not the warm-up calls, nor the first PROBE_SKIP
        of each block)."""
        st = tn.state
        k = st.last - PROBE_WARM
        if self.me == 0 and st.choice is None and k >= 0 and k % PROBE_BLOCK >= PROBE_SKIP:
            st.times[k // PROBE_BLOCK].append(seconds)

    def hot(self, sc: Small, a: np.ndarray, out: Optional[np.ndarray], seq: int, timeout: float) -> None:
        """One call through the slots, every step inlined: copy in, publish, wait, check, read (reductions
        in rank order: identical bits on every rank), mark done. Above the one-shot size: the call shape's
        page program (_program)."""
        self.f = f = self.f + 1
        q = f & 1
        pos = f % sc.npos  # where this call's payload lies (its parity is q)
        W, B = self.W, self.B
        if f > 2 and self.safe < f - 2:  # every peer must have finished reading call f-2 (this slot)
            done = self.page.done
            self._wait(lambda: int(done.min()) >= f - 2, lambda: [i for i in self.peers if int(done[i]) < f - 2],
                       time.monotonic() + timeout, seq, sc.sigb)
        if sc.program is not None:
            if sc.push is not None and out is not None and not np.may_share_memory(a, out):
                return self._push(sc, a, out, f, pos, seq, timeout)
            return self._program(sc, a, out, f, pos, seq, timeout)
        if sc.kind == A2A:  # the peers' blocks into this rank's slot (its own block it copies out directly)
            mine = sc.mine[pos]
            a2 = a.reshape(mine.shape)
            for j in self.peers:
                mine[j] = a2[j]
        elif sc.sends:
            sc.mine[pos][...] = a
        _META.pack_into(self.page.mm, self.hoff[q], seq, sc.crc, sc.nbytes, sc.head)
        W[self.my_w[q]] = f  # publish last
        wake = self.wake
        for flag, bell in wake:
            if B[flag]:
                bell.ring()
        if sc.res is not None:
            return self._reduce_once(sc, a, f, pos, seq, timeout)
        crc = sc.crc
        for pw in self.peer_w[q]:  # every peer's header published and of this call (else wait or raise there)
            if W[pw] < f or W[pw + GSEQ] != seq or W[pw + CRC] != crc:
                self._gather_headers(sc, f, q, seq, timeout)
                break
        else:
            self.safe = f - 1  # a peer publishes call f only after finishing call f-1
        kind = sc.kind
        if kind == AR or kind == RS:
            dst = a if kind == AR else out
            parts = sc.parts[pos]
            fn = sc.fn
            if len(parts) > 1:  # (out passed by position: a ufunc parses a keyword in 0.25 us more)
                fn(parts[0], parts[1], dst)
                for k in range(2, len(parts)):
                    fn(dst, parts[k], dst)
            else:
                dst[...] = parts[0]
            if sc.avg:
                finish_avg(dst, self.n)
        elif kind == BC:
            if not sc.sends:
                a[...] = sc.parts[pos][0]
        elif kind == AG:
            out.reshape(sc.oshape)[...] = sc.stack[pos]
        elif kind == A2A:
            col = sc.stack[pos]
            o2 = out.reshape(col.shape)
            for j in self.peers:
                o2[j] = col[j]
            o2[self.me] = a2[self.me]  # (a2: this call's input by blocks, from the slot write above)
        W[self.done_w] = f
        for flag, bell in wake:
            if B[flag]:
                bell.ring()

    def _reduce_once(self, sc: Small, a: np.ndarray, f: int, pos: int, seq: int, timeout: float) -> None:
        """The one-shot all_reduce of an oversubscribed host (this rank has published): the rank that
        finds every peer published reduces every slot, in rank order, and writes the result into the
        shared result slot; the others wait for it and copy it out. Two ranks publishing at once may
        both reduce: they write the same bits. The signature check runs on every rank."""
        W, q = self.W, pos & 1
        rw = self.ready_w[q]
        if self._all_published(f, q):
            try:
                self._gather_headers(sc, f, q, seq, timeout)
            except CollectiveMismatchError:
                self._set(rw, f)  # the waiters check the signatures themselves
                raise
            parts, fn = sc.parts[pos], sc.fn
            fn(parts[0], parts[1], a)
            for k in range(2, len(parts)):
                fn(a, parts[k], a)
            if sc.avg:
                finish_avg(a, self.n)
            sc.res[pos][...] = a
            self._set(rw, f)
        else:
            if W[rw] < f:
                peer_w = self.peer_w[q]
                self._wait(lambda: W[rw] >= f, lambda: [i for i, x in zip(self.peers, peer_w) if W[x] < f],
                           time.monotonic() + timeout, seq, sc.sigb)
            self._gather_headers(sc, f, q, seq, timeout)  # every peer has published: no wait
            a[...] = sc.res[pos]
        self._set(self.done_w, f)

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

    def _announce(self, sc: Small, addr: int, f: int, q: int, seq: int,
                  reg: Optional[tuple[int, int, int, int]] = None, dst: int = 0) -> int:
        """Publish this rank's header for call f, with (pid, address) of its input and, when the input
        lives in an interlink.empty arena (reg), where (serial, fd, offset, size): peers then read it in
        place; addr: the input's address; dst: the address peers push into. Returns the arena serial (0: not
        shared)."""
        W = self.W
        mw = self.my_w[q]
        serial = 0
        W[mw + DESC] = self.pids[self.me]
        W[mw + DESC + 6] = dst
        if sc.sends:
            W[mw + DESC + 1] = addr
            if reg is not None:
                serial = reg[0]
                W[mw + DESC + 3], W[mw + DESC + 4], W[mw + DESC + 5] = reg[1], reg[2], reg[3]
        W[mw + DESC + 2] = serial  # 0 from a rank that sends nothing (a broadcast's receivers) too
        _META.pack_into(self.page.mm, self.hoff[q], seq, sc.crc, sc.nbytes, sc.head)
        self._set(mw, f)  # publish
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

    def _program(self, sc: Small, a: np.ndarray, out: Optional[np.ndarray], f: int, pos: int, seq: int,
                 timeout: float) -> None:
        """A call too large for a slot (fastd), run step by step from its Schedule's program for this rank
        (runtime/pageplan.py): every rank publishes the addresses of its input and output with its header;
        each Move walks its destination a cache-sized piece at a time through its sources (this rank's
        buffers; a peer's input mapped in place when it lives in an interlink.empty arena; else the peer's
        memory by cross-memory attach), each PutOp writes into a peer's output by cross-memory attach.
        Between rounds a rank waits only for the peers the next round touches; it returns when every peer
        that reads its buffers is done."""
        q = pos & 1  # the call's parity: its slot header and progress words
        prog = sc.program
        flat = a.reshape(-1)
        o = flat if out is None else out.reshape(-1)
        kind = sc.kind
        # in place: the input is the output's chunk the Schedule's no-op copies say (those are skipped);
        # the addresses are read only where the buffers overlap at all, or peers push into the output
        overlap = o is flat or (kind in (AG, RS) and np.may_share_memory(flat, o))
        check = overlap and prog.noops and kind in (AG, RS)
        op_ = cma.address(o) if prog.out_addr or check else 0
        desc = prog.readers or prog.slot_readers or prog.out_addr  # peers may read my buffers' addresses
        ia = cma.address(flat) if check or (desc and sc.sends) else 0  # my input's address, read once
        inplace = kind in (AR, BC) or (check and (
            (kind == AG and op_ + self.me * flat.nbytes == ia) or (kind == RS and ia + self.me * o.nbytes == op_)))
        reg = self._arena(sc, flat, ia) if desc else None
        serial = reg[0] if reg is not None else 0
        rounds = prog.rounds
        base = ROUND_STRIDE * f
        rd = self.my_w[q] + RD
        # the ops bound for this position in the slots and these facts of the call (_bind): whether the
        # input is read in place, the call runs in place, and the input and output overlap at all
        key = (pos, serial != 0, inplace, overlap)
        bound = sc.bound.get(key)
        if bound is None:
            if len(sc.bound) > 8 * sc.npos:
                sc.bound.clear()
            bound = sc.bound[key] = ({},) + self._bind(sc, pos, key, (), a.dtype.itemsize, early=True)
        by_map, early, slot = bound
        bufs = (flat, o, slot)
        # the first round's local steps (into this rank's own slot and output) before the header: when
        # they are the whole round, its end is published with the header (one publish, as the one-shot path)
        for run in early:
            run(bufs, None)
        skip = 1 if rounds and not rounds[0].ops and not rounds[0].before and not rounds[0].waits else 0
        if skip and rounds[0].publish:
            self.W[rd] = base + rounds[0].end
        if prog.readers or prog.out_addr or serial:  # peers read or write my buffers: their addresses
            self._announce(sc, ia, f, q, seq, reg, op_)
        else:  # the header alone (peers read my slot only: my input is not mapped)
            if desc:
                self.W[self.my_w[q] + DESC + 2] = 0
            _META.pack_into(self.page.mm, self.hoff[q], seq, sc.crc, sc.nbytes, sc.head)
            self._set(self.my_w[q], f)
        self._gather_headers(sc, f, q, seq, timeout)
        # the peers whose input lives in an interlink.empty arena (a serial in their header) are mapped
        W, slot_w = self.W, self.slot_w
        shared = [i for i in prog.maps if W[slot_w[i][q] + DESC + 2]] if prog.maps else ()
        if shared:
            mapped = {i: self._shared_input(i, q, a.dtype, sc.count) for i in shared}
            mk = tuple(i for i in shared if mapped[i] is not None)
        else:
            mapped, mk = _NOMAP, ()
        steps = by_map.get(mk)
        if steps is None:
            if len(by_map) > 16:  # as many sets of mapped peers as calls have shown (few in practice)
                by_map.clear()
            steps = by_map[mk] = self._bind(sc, pos, key, mk, a.dtype.itemsize)
        for k in range(skip, len(rounds)):  # rounds first..end-1 of the Schedule; the progress word counts them
            rnd = rounds[k]
            if rnd.before:
                self._await_round(rnd.before, q, base, seq, sc, timeout)
            for run in steps[k]:
                run(bufs, mapped)
            if rnd.publish:  # only where a peer waits for it (a publish may wake a sleeping peer)
                self._set(rd, base + rnd.end)
            if rnd.waits:
                self._await_round(tuple((i, rnd.end) for i in rnd.waits), q, base, seq, sc, timeout)
        self._set(self.done_w, f)
        readers = prog.readers + prog.slot_readers if serial else prog.readers
        if readers:  # my buffers must outlive every reader's copy (my input too, when read in place)
            self._await_readers(f, seq, sc, timeout, list(readers))
        if sc.avg:  # the sums, divided once every reader has them (each rank divides the same bits)
            finish_avg(o, self.n)

    def _push(self, sc: Small, a: np.ndarray, out: np.ndarray, f: int, pos: int, seq: int, timeout: float) -> None:
        """A push program (_push_form: the fastd all_gather) run inlined, out of place: the same words and
        the same order as _program (publish the header with this rank's output address; copy the input
        into its place in the output a piece at a time, each piece pushed into every peer's output while it
        is in cache; publish the round; wait for the peers' pushes into this rank's output; done), without
        the general executor's per-call decisions (2 ranks, 1 MiB of output: 20-30 us a call less)."""
        off, count, pushes, waits, end = sc.push
        q = pos & 1
        flat, o = a.reshape(-1), out.reshape(-1)
        W = self.W
        mw = self.my_w[q]
        W[mw + DESC] = self.pids[self.me]
        W[mw + DESC + 6] = cma.address(o)  # where the peers push
        W[mw + DESC + 2] = 0  # not read in place: nobody maps it (nor reads its address, DESC + 1)
        _META.pack_into(self.page.mm, self.hoff[q], seq, sc.crc, sc.nbytes, sc.head)
        self._set(mw, f)  # publish
        dst = o[off:off + count]
        step = max(1, self.push_piece // flat.dtype.itemsize)
        cross = self._cross
        # outputs too large for the cache (policy.stream_min_bytes): this rank's block goes into its output with
        # streaming stores and is pushed from the input, which that copy has just read into the cache; else the
        # copy is pushed (in cache)
        streamed = stream.available and o.nbytes * self.n >= self._stream_min(sc)
        for lo in range(0, count, step):
            src = flat[lo:lo + step]
            piece = dst[lo:lo + step]
            if streamed:
                stream.copy(piece, src)
            else:
                piece[...] = src
                src = piece
            if lo == 0:  # the first piece was copied while the peers published
                self._gather_headers(sc, f, q, seq, timeout)
            for peer, at in pushes:
                cross(peer, q, DESC + 6, at + lo, src, True)
        if not count:
            self._gather_headers(sc, f, q, seq, timeout)
        base = ROUND_STRIDE * f
        self._set(mw + RD, base + end)
        self._await_round(waits, q, base, seq, sc, timeout)
        self._set(self.done_w, f)

    def _stream_min(self, sc: Small) -> int:
        """The host's bytes from which this shape's copies stream: the rule's (policy.stream_min_bytes), or
        a measured shape's forced choice (Small.stream: every copy of at least stream.MIN_BYTES, or none)."""
        return self.stream_min if sc.stream is None else 0 if sc.stream else 1 << 62

    def _bind(self, sc: Small, pos: int, key: tuple, mk: tuple, isz: int, early: bool = False) -> Any:
        """The call shape's program bound for one slot parity and the facts of a call that decide what its
        ops do: key = (parity, input read in place, in place, input and output overlap), mk = the peers
        whose input is mapped in place. early: (the first round's early ops, this rank's slot); else the
        ops of each round. Each op is a callable (buffers, mapped) -> None. What is the same on every such
        call is decided here once: the ops that do nothing (empty, elided, no-op in place) go; a slot's
        view (this rank's, a peer's) is made here; a copy or a chain whose sources all lie in this rank's
        buffers or the peers' slots runs as a few slices and ufunc calls. An op that reads a peer's own
        buffer (mapped, or by cross-memory attach), writes into one, or whose source may overlap its
        destination in this call runs through _op."""
        _, serial, inplace, overlap = key
        prog = sc.program
        stack = sc.stack[pos] if prog.scratch else None
        # the outputs of the host's ranks in this call: copies into them stream when they are too large
        # to be in cache (policy.stream_min_bytes)
        smin = self._stream_min(sc)
        streamed = stream.available and self.host_outputs(sc.kind, sc.count * isz) >= smin
        slot_streamed = stream.available and sc.count * isz * self.n >= smin  # the inputs, into the slots

        def bind(op: Any) -> Any:
            generic = (lambda bufs, mapped, op=op: self._op(sc, op, bufs, mapped, pos, serial, inplace))
            if isinstance(op, PutOp):
                return generic if op.count else None
            if op.pushes:
                return generic
            n = op.count
            if n == 0 or (op.elide and serial) or (op.noop and inplace):
                return None
            if any(s.peer != LOCAL and (s.buf != SCR or (s.alt >= 0 and s.peer in mk) or stack is None)
                   for s in op.srcs):
                return generic  # a peer's own buffer (or its input, mapped, in place of its slot)
            if op.hazard and (overlap or any(s.peer == LOCAL and s.buf == op.buf and s.off < op.off + n
                                             and op.off < s.off + n for s in op.srcs)):
                return generic  # a local source may overlap the destination in this call

            def spec(buf: int, peer: int, off: int) -> tuple:  # (fixed view, None) or (None, (buf, lo, hi))
                if peer != LOCAL:
                    return stack[peer][off:off + n], None
                if buf == SCR:
                    return stack[self.me][off:off + n], None
                return None, (buf, off, off + n)

            dv, du = spec(op.buf, LOCAL, op.off)
            srcs = [spec(s.buf, s.peer, s.off) + (s.reduce,) for s in op.srcs]
            fn = sc.fn
            if len(srcs) == 1 and not srcs[0][2]:  # one copy
                sv, su, _ = srcs[0]
                if du is not None and du[0] == OUT and streamed and n * isz >= stream.MIN_BYTES:
                    # into an output too large to be in cache: streaming stores (transport/stream.py)
                    if sv is not None:
                        def run(bufs, mapped, s=sv, lo=du[1], hi=du[2], copy=stream.copy):
                            copy(bufs[OUT][lo:hi], s)
                    else:
                        def run(bufs, mapped, lo=du[1], hi=du[2], sb=su[0], slo=su[1], shi=su[2], copy=stream.copy):
                            copy(bufs[OUT][lo:hi], bufs[sb][slo:shi])
                    return run
                if dv is not None and sv is None and slot_streamed and n * isz >= stream.MIN_BYTES:
                    # into this rank's slot, when the host's slots hold that much in this call: their lines
                    # are not in cache either (the peers read them from memory, as after the slot's rotation)
                    def run(bufs, mapped, d=dv, b=su[0], lo=su[1], hi=su[2], copy=stream.copy):
                        copy(d, bufs[b][lo:hi])
                    return run
                if dv is not None and sv is not None:
                    def run(bufs, mapped, d=dv, s=sv):
                        d[...] = s
                elif dv is not None:
                    def run(bufs, mapped, d=dv, b=su[0], lo=su[1], hi=su[2]):
                        d[...] = bufs[b][lo:hi]
                elif sv is not None:
                    def run(bufs, mapped, s=sv, b=du[0], lo=du[1], hi=du[2]):
                        bufs[b][lo:hi] = s
                else:
                    def run(bufs, mapped, b=du[0], lo=du[1], hi=du[2], sb=su[0], slo=su[1], shi=su[2]):
                        bufs[b][lo:hi] = bufs[sb][slo:shi]
                return run
            # a chain, walked a piece at a time (the destination stays in cache across its sources), as _op
            step = max(1, 2 * self.chunk // isz)
            step = n if n <= step else step
            pieces = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
            pair = len(srcs) > 1 and not srcs[0][2] and srcs[1][2]

            def run(bufs, mapped, dv=dv, du=du, srcs=srcs, pieces=pieces, pair=pair, fn=fn):
                dst = dv if dv is not None else bufs[du[0]][du[1]:du[2]]
                views = [v if v is not None else bufs[u[0]][u[1]:u[2]] for v, u, _ in srcs]
                for lo, hi in pieces:
                    acc = dst[lo:hi]
                    j = 0
                    if pair:
                        fn(views[0][lo:hi], views[1][lo:hi], out=acc)
                        j = 2
                    for k in range(j, len(srcs)):
                        if srcs[k][2]:
                            fn(acc, views[k][lo:hi], out=acc)
                        else:
                            acc[...] = views[k][lo:hi]
            return run

        rounds = prog.rounds
        if early:
            return (tuple(r for r in (bind(op) for op in (rounds[0].early if rounds else ())) if r is not None),
                    stack[self.me] if stack is not None else None)
        return [tuple(r for r in (bind(op) for op in rnd.ops) if r is not None) for rnd in rounds]

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

    def _cross(self, i: int, q: int, word: int, off: int, buf: np.ndarray, write: bool) -> None:
        """buf <-> rank i's buffer (its input: word DESC + 1, its output: DESC + 6) from element off, by
        cross-memory attach in pieces of 64 chunks; PeerClosed naming rank i when it fails."""
        W = self.W
        isz = buf.dtype.itemsize
        piece = self.cma_piece // isz
        w = self.slot_w[i][q]
        pid, base = W[w + DESC], W[w + word] + off * isz
        move = cma.write if write else cma.read
        try:
            if buf.size <= piece:
                move(pid, base, cma.address(buf), buf.nbytes)
            else:
                at = cma.address(buf)
                for lo in range(0, buf.size, piece):
                    move(pid, base + lo * isz, at + lo * isz, min(piece, buf.size - lo) * isz)
        except OSError as e:
            from ..transport.base import PeerClosed

            raise PeerClosed(self.members[i], f"({'writing into' if write else 'reading'} its buffer failed: "
                                              f"{e})") from None

    def _op(self, sc: Small, op: Any, bufs: tuple, mapped: Optional[dict], pos: int, serial: int,
            inplace: bool) -> None:
        """One operation of a page program (pageplan.Move or PutOp) on this call's buffers (input, output,
        slot); mapped: the peers' inputs mapped in place; pos: the call's place in the slots (its parity
        pos & 1); serial: this rank's input is read in place; inplace: the call's input is its output's
        chunk (the Schedule's no-op copies are skipped)."""
        q = pos & 1
        if isinstance(op, PutOp):
            if op.count:
                self._cross(op.peer, q, DESC + 6, op.dst_off, bufs[op.buf][op.off:op.off + op.count], True)
            return
        n = op.count
        if n == 0 or (op.elide and serial) or (op.noop and inplace):
            if n and op.noop and inplace and op.pushes:  # already there: only the pushes remain
                dst = bufs[op.buf][op.off:op.off + n]
                for peer, at in op.pushes:
                    self._cross(peer, q, DESC + 6, at, dst, True)
            return  # nothing to do, the peers read this part of my input in place, or it is already there
        dst = bufs[op.buf][op.off:op.off + n]
        srcs = op.srcs
        if len(srcs) == 1 and not srcs[0].reduce and not op.pushes:  # one copy
            s = srcs[0]
            if s.peer == LOCAL:
                dst[...] = bufs[s.buf][s.off:s.off + n]
                return
            view, far = self._source(sc, s, n, mapped, pos)
            if view is None:
                self._cross(far[0], q, far[1], far[2], dst, False)
            else:
                dst[...] = view
            return
        srcs = [self._source(sc, s, n, mapped, pos) + (s.reduce,) if s.peer != LOCAL else
                (bufs[s.buf][s.off:s.off + n], None, s.reduce) for s in srcs]
        aligned: set = set()
        save = False
        if op.hazard:
            for j, (view, _, _) in enumerate(srcs):  # a local source that overlaps the destination otherwise
                if view is not None and np.may_share_memory(view, dst) and \
                        view.__array_interface__["data"][0] != dst.__array_interface__["data"][0]:
                    srcs[j] = (view.copy(), None, srcs[j][2])  # than element for element: read it first
            # a source that is the destination itself (in place: this rank's own chunk) is read from a copy
            # of each piece when an earlier source has written over it
            aligned = {j for j, (view, _, _) in enumerate(srcs) if view is not None and np.may_share_memory(view, dst)}
            save = any(j > 0 for j in aligned)
        # a chain: the destination a piece at a time (it stays in cache across the sources)
        isz = dst.dtype.itemsize
        fn = sc.fn
        step = max(1, 2 * self.chunk // isz)
        if op.pushes and len(srcs) == 1 and not srcs[0][2] and srcs[0][0] is not None:
            step = max(1, self.push_piece // isz)  # a plain copy pushed out: fewer, larger writes
        # a copy then a reduction, both readable in place: one operation (acc = s0 op s1)
        pair = len(srcs) > 1 and not srcs[0][2] and srcs[1][2] and srcs[0][0] is not None and \
            srcs[1][0] is not None and not (aligned & {0, 1})
        far_any = save or any(view is None for view, _, _ in srcs)
        if not far_any and n <= step:
            step = n  # one piece, no scratch: every source is readable in place
        # a reduction whose destination lies 1-31 bytes past a source modulo 4 KiB (two arrays allocated one
        # after the other from the heap) runs every load into the store just made (4K aliasing,
        # transport/cma.py): each piece is then reduced in a staging buffer 2 KiB off it and copied out
        # (2-rank reduce_scatter 4 MiB, output 16 bytes past the input: 1856 -> 900 us). Plain copies of
        # pieces this large take glibc's non-temporal path, which does not suffer it (staging cost them
        # 0.62-0.95x)
        stage = not aligned and not save and n * isz >= cma.BOUNCE_MIN and any(red for _, _, red in srcs) and any(
            view is not None and cma.aliased(cma.address(dst), cma.address(view)) for view, _, _ in srcs)
        first_reduces = not pair and srcs[0][2]
        for lo in range(0, n, step):
            hi = min(lo + step, n)
            out_piece = acc = dst[lo:hi]
            if stage:
                acc = self._staging(out_piece)
                if first_reduces:  # the destination holds the first operand (in place: this rank's input)
                    acc[...] = out_piece
            if far_any:
                both = self._scratch(2 * (hi - lo) * isz).view(dst.dtype)
                tmp = both[:hi - lo]
            if save:
                saved = both[hi - lo:]
                saved[...] = acc
            if pair:
                fn(srcs[0][0][lo:hi], srcs[1][0][lo:hi], out=acc)
            for j, (view, far, red) in enumerate(srcs):
                if pair and j < 2:
                    continue
                if view is not None:
                    if j in aligned:
                        if j == 0 and not red:
                            continue  # the destination already holds it
                        src = saved if j > 0 else acc
                    else:
                        src = view[lo:hi]
                    if red:
                        fn(acc, src, out=acc)
                    else:
                        acc[...] = src
                elif not red:
                    self._cross(far[0], q, far[1], far[2] + lo, acc, False)
                else:
                    self._cross(far[0], q, far[1], far[2] + lo, tmp, False)
                    fn(acc, tmp, out=acc)
            if stage:
                out_piece[...] = acc
            for peer, at in op.pushes:  # the piece is final: into the peers' outputs while it is in cache
                self._cross(peer, q, DESC + 6, at + lo, acc, True)

    def _source(self, sc: Small, s: Any, n: int, mapped: dict, pos: int) -> tuple:
        """A peer's source chunk: (a view to read, None), or (None, (peer, word, offset)) to read by
        cross-memory attach. A peer's slot is shared memory, or its input itself where it skipped the copy
        into the slot; its input (or its output, when that is its input) is read in place when mapped."""
        if s.buf == SCR:
            v = mapped.get(s.peer) if s.alt >= 0 else None
            return (sc.stack[pos][s.peer][s.off:s.off + n] if v is None else v[s.alt:s.alt + n]), None
        v = mapped.get(s.peer)
        if v is not None and s.buf == OUT:  # a peer's output is its mapped input only when they are one
            w = self.slot_w[s.peer][pos & 1] + DESC
            if self.W[w + 6] != self.W[w + 1]:
                v = None
        if v is not None:
            return v[s.off:s.off + n], None
        return None, (s.peer, DESC + 1 if s.buf == IN else DESC + 6, s.off)

    def _staging(self, piece: np.ndarray) -> np.ndarray:
        """A buffer for one piece of a destination, 2 KiB off it modulo 4 KiB (kept between calls)."""
        need = piece.nbytes + 8192
        if self._stage is None or self._stage.nbytes < need:
            self._stage = np.empty(need, dtype=np.uint8)
        off = (cma.address(piece) + 2048 - cma.address(self._stage)) & 4095
        return self._stage[off:off + piece.nbytes].view(piece.dtype)

    def _scratch(self, nbytes: int) -> np.ndarray:
        """nbytes of this rank's scratch (kept between calls: fresh pages fault)."""
        if self._piece is None or self._piece.nbytes < nbytes:
            self._piece = np.empty(nbytes, dtype=np.uint8)
        return self._piece[:nbytes]
