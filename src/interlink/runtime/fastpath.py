"""The shared-memory paths of a group whose ranks all share one host (the world group of such a job).

Every path is a registered Schedule (algorithms/hostpage.py), verified by the reference interpreter, priced
from its steps by the model and run by the simulator; which one a call takes is
algorithms/hostpath.py's choice (``host_path``, on the limits named there). FastPath is the host page's
runtime, one concern a module:

- runtime/pageproto.py: the page protocol (slot header words, publishing, waiting, signature checks);
- runtime/autotune.py: the measured band (both paths timed on a shape's first calls, the faster kept);
- runtime/oneshot.py: the one-shot latency path, inlined (`slots`, `slots_once`, the barrier);
- runtime/pageexec.py: everything larger, step by step from its Schedule's program (runtime/pageplan.py);
- here: the limits on this host's page, the choice of path per call shape and its cached views (``small``).
"""

from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np

from ..algorithms import hostpath, registry
from ..algorithms.hostpage import host_plan
from ..ops import ReduceOp, ufunc
from ..transport import shmalloc, stream
from ..transport.shm import HEADERS
from . import ccore, policy
from .autotune import (PROBE_BLOCK, PROBE_BLOCKS, PROBE_CALLS, PROBE_SKIP, PROBE_WARM, Autotune,  # noqa: F401
                       Tune, TuneState, choose, probe_path)
from .engine import Engine
from .oneshot import OneShot
from .pageexec import PageProgram, _push_form
from .pageplan import compile_page
from .pageproto import (A2A, AG, AR, BAR, BC, CRC, DESC, GSEQ, MAX_ROTATION, NAMES, NBYTES, RD,  # noqa: F401
                        ROTATION_BUDGET, RS, SEQ, SIG_BYTES, SIG_OFF, PageProtocol, Small)

#: the FastPath attributes the compiled core holds where it runs (_CoreFastPath)
CORE_STATE = ("f", "safe", "pend", "pend_hi", "last", "run")
#: the largest one-shot broadcast whose root may run HEADERS - 1 calls ahead of its receivers (_ahead_places)
AHEAD_MAX = 64 << 10


class FastPath(PageProtocol, Autotune, OneShot, PageProgram):
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
        self.max = lim.oneshot()  # the one-shot path (slots, slots_once)
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
        # a copy whose pieces are pushed into peers' outputs (peer_buffers all_gather) walks 2 MiB at a time: it
        # does no arithmetic to keep in L2, and each piece costs a cross-memory write per peer
        self.push_piece = 16 * self.chunk
        self.f = 0  # fast-path calls so far (the same on every rank)
        # every rank's call headers (call f: entry f % HEADERS, transport/shm.py): the call number published,
        # group seq, crc, size and signature
        H = range(HEADERS)
        self.headers = [[self.page.header(i, h) for h in H] for i in range(self.n)]
        self.peers = [i for i in range(self.n) if i != self.me]
        # byte offsets of every rank's (group seq, crc, nbytes) header words, per header entry
        page = self.page
        self.goff = [[page.header_offset(i, h) + 8 * GSEQ for h in H] for i in range(self.n)]
        self.hoff = self.goff[self.me]
        self.bells = [self.page.bell(i) for i in self.peers]
        self.members = bell.members
        self.spin = engine.spin
        self.yield_after = engine.yield_after  # spins before each further one yields the core
        self.safe = 0  # every peer is known to have finished reading calls <= safe
        # a broadcast root's calls pend..pend_hi whose receivers' headers are not yet checked (0: none):
        # OneShot._settle
        self.pend = 0
        self.pend_hi = 0
        # the last call's shape (Small.lid) and how many calls in a row ended with it: how far back a call
        # must wait for its slot (Small.depth, OneShot._need)
        self.last = 0
        self.run = 0
        # INTERLINK_TRACE (runtime/recorder.py): the one-shot path notes when a call's peers were in (t1), and
        # its calls run in Python (the compiled core has no phases to show)
        self.traced = False
        self.t1 = 0.0
        self.waiting: Any = None  # (call, ranks it waits for): set when a call sleeps (runtime/recorder.py)
        # the hot path reads and writes the page's control words as Python ints through memoryviews
        # (20 ns a word, against 70 ns through numpy scalars)
        self.W = page.words64()
        self.B = page.words32()
        # [rank][entry] -> the u64 word of its call header (the published call number; GSEQ, CRC follow)
        head_w = [[page.header_word(i, h) for h in H] for i in range(self.n)]
        self.head_w = head_w
        self.my_w = head_w[self.me]
        self.peer_w = [[head_w[i][h] for i in self.peers] for h in H]
        # [rank][parity] -> its slot header's words: the descriptors of its buffers (DESC..) and the rounds of
        # a page program it has finished (RD), which only calls that wait for the call before last write
        self.slot_w = [[page.slot_word(i, q) for q in (0, 1)] for i in range(self.n)]
        self.my_d = self.slot_w[self.me]
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
        # the re-measurement's interval (policy.autotune_reprobe, a power of two) as its exponent + 1 in bits
        # 4-8: every rank takes the AND of everyone's, so every rank counts to the same calls
        reprobe = policy.autotune_reprobe()
        agreed = self._agree(int(self.cma) | 2 * int(self.once) | 4 * int(rotate) | 8 * int(policy.autotune())
                             | (reprobe.bit_length() << 4))
        self.cma, self.once = bool(agreed & 1), bool(agreed & 2)
        # all_gather and all_to_all between the slots and peer_buffers: measured per call shape (pick)
        self.autotune = bool(agreed & 8) and self.cma
        # copies into the outputs and the slots of a page program: streaming stores or plain, measured from 256 KiB of
        # the host's outputs to 4x stream_min (stream_tuned)
        self.autotune_stream = bool(agreed & 8) and stream.available
        self.reprobe = 1 << ((agreed >> 4) - 1) if agreed >> 4 else 0
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
        self.resumes = [0, 0]  # page-program calls the compiled core handed back, by stage (PageProgram._program)
        self.arenas = shmalloc.PeerArenas()
        # all_reduce from the ranks' own buffers (each rank reduces its 1/p slice reading every rank's
        # buffer, then copies the other slices): above this size
        self.ar_direct_min = lim.peer_buffers_all_reduce_min
        # the compiled core of the one-shot path (runtime/ccore.py): it keeps the call count and `safe`
        self.core = ccore.make_core(self)
        if self.core is not None:
            for k in CORE_STATE:
                setattr(self.core, k, self.__dict__.pop(k))
            self.__class__ = _CoreFastPath

    def takes(self, kind: int, nbytes: int) -> bool:
        """Whether a call with nbytes of input goes through the host page (the slots, or the ranks' own
        buffers), not the channels (hostpath.takes). The same on every rank (size and agreed flags only)."""
        return hostpath.takes(NAMES[kind], nbytes, self.n, self.limits, cma=self.cma)

    def thresholds(self) -> dict[str, int]:
        """The sizes (bytes of a call's input) at which this host's choice of path changes: what `takes`
        and `small` read. The differential tests draw sizes on both sides of each."""
        return {"oneshot.max": self.max, "all_reduce.oneshot.max": self.limits.all_reduce_oneshot(self.n, self.once),
                "inline.max": self.inline_max, "two_phase.max": self.direct_max,
                "slots.max": self.move_max,
                "slots.max.all_gather": self.move_max_ag,
                "slots.max.all_to_all": self.move_max_a2a,
                "peer_buffers.all_reduce.min": self.ar_direct_min, "page.chunk": self.chunk,
                "peer_buffers.piece": 2 * self.chunk, "peer_buffers.cma_piece": 64 * self.chunk,
                "peer_buffers.push_piece": self.push_piece,
                "slots.rotation_min": self.rot_min if self.rot_bytes > 0 else 0,
                # copies stream from here (the host's outputs add up to policy.stream_min_bytes): an input as
                # large as its output (where the slots still take it), and an all_gather's per-rank input
                "stream.min": self._stream_at(self.n),
                "stream.min.all_gather": self._stream_at(self.n ** 2, all_gather=True),
                # the band where the slots and peer_buffers are measured against each other (pick; 0: none)
                "tune.all_gather.lo": self.band(AG)[0], "tune.all_gather.hi": self.band(AG)[1],
                "tune.all_to_all.lo": self.band(A2A)[0], "tune.all_to_all.hi": self.band(A2A)[1]}

    def _stream_at(self, div: int, all_gather: bool = False) -> int:
        """The input bytes from which a call's copies stream (0: never, or beyond any path that streams)."""
        if not stream.available or self.stream_min >= 1 << 61:
            return 0
        at = -(-self.stream_min // div)
        reach = self.move_max if self.n == 2 else self.page.fast_max  # broadcast, two_phase: the slots' limit
        return at if all_gather or at <= reach else 0

    def _limit(self, kind: int) -> int:
        """The input bytes above which a broadcast, all_gather, reduce_scatter or all_to_all leaves the slots
        for peer_buffers (hostpath.HostLimits.slots_limit)."""
        return self.limits.slots_limit(NAMES[kind], self.n, self.cma)

    def band(self, kind: int) -> tuple[int, int]:
        """The inputs (lo, hi] for which this host measures the slots against peer_buffers (pick); (0, 0): none. A
        broadcast too large for a slot goes through it in chunks (slots_pipelined), up to PIPE_CHUNKS / 2 slots."""
        if not self.autotune or kind not in (AG, A2A, BC):
            return 0, 0
        return self.limits.measured_band(NAMES[kind], self.n, self.cma)

    def host_outputs(self, kind: int, nbytes: int) -> int:
        """The bytes every local rank's output of a call with nbytes of input add up to (what decides
        whether its copies into them stream: policy.stream_min_bytes)."""
        return nbytes * self.n * (self.n if kind == AG else 1) // (self.n if kind == RS else 1)

    def small(self, kind: int, a: np.ndarray, out: Optional[np.ndarray], op: ReduceOp, root: int,
              group: str, direct: Optional[bool] = None, streams: Optional[bool] = None) -> Small:
        """The cached views of a one-shot call of this shape (the caller validated it and checked that
        the input fits a slot). ``direct``: force peer_buffers (True) or the slots (False); None: the limits
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
        once = path == "slots_once"
        # the inlined executor: the one-shot sizes, and a broadcast, all_gather or reduce_scatter through the
        # slots up to inline_max (the same `slots` Schedule, without the step-by-step executor's per-call cost)
        inline = hostpath.inlined(NAMES[kind], a.nbytes, path, self.limits)
        # the call shape's plan comes from its Schedule (checked to be of the form this executor runs)
        # (slots_once: the reducer is whichever rank publishes last; the plan is the Schedule of the last
        # rank, and every reducer's Schedule computes the same bits: tests/test_algorithms_hostpage.py)
        schedule = registry.get_schedule(NAMES[kind], path, self.n,
                                         count // self.n if kind in (RS, A2A) else 0 if kind == BAR else count,
                                         self.n - 1 if once else root)
        # where in its slot each call's payload lies (the Schedule's scratch, or the one-shot's count)
        rot, stride = self._rotation((schedule.buffers.get("scratch", 0) if not inline else count if kind != BAR
                                      else 0) * dt.itemsize)
        if inline and kind == BC:  # a root may run ahead of its receivers by as many calls as it has places
            rot, stride = self._ahead_places(count * dt.itemsize, rot, stride)
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
                if self.core is not None and not self.traced:  # a program through the slots alone: in C
                    # (its copies stream as PageProgram._bind's would: the rule's, or the measured side's; below
                    # the band that measures them, the core measures its copies into the slot itself)
                    smin, isz = self._stream_min(sc), dt.itemsize
                    sc.cprog = ccore.make_prog(self, sc, op, dt,
                                               stream.available and self.host_outputs(kind, count * isz) >= smin,
                                               stream.available and count * isz * self.n >= smin,
                                               streams is None and not self.stream_tuned(kind, a.nbytes))
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
        # how many calls back this shape's calls wait for their readers (OneShot._need): a small broadcast's root
        # its places (it reads nothing: it may run ahead of its receivers); a call that writes no payload
        # (a broadcast's receiver, a barrier) its header entries; every other call the call before last
        if not sends:
            sc.depth = HEADERS
        elif kind == BC and a.nbytes <= AHEAD_MAX:
            sc.depth = min(HEADERS, sc.npos)
        if self.core is not None and not self.traced:
            sc.ccore = ccore.make_shape(self, sc, op, dt)
        return sc

    def _ahead_places(self, nbytes: int, rot: int, stride: int) -> tuple[int, int]:
        """(places per parity, bytes between them) of a one-shot broadcast's payload: HEADERS / 2 places a
        parity where the slot holds them (cache lines apart, or _rotation's stride where larger), so that its
        root can publish up to HEADERS calls before its receivers have read the first (OneShot._need); the
        same on every rank (the size and the page only). Up to AHEAD_MAX bytes: a larger payload keeps
        _rotation's places (each place a payload further through the reader's cache)."""
        if 2 * rot >= HEADERS or nbytes > AHEAD_MAX:
            return rot, stride
        st = max(stride, 64, -(-nbytes // 64) * 64)
        places = min(HEADERS // 2, self.page.fast_max // st)
        return (places, st) if places > rot else (rot, stride)


def _in_core(name: str) -> property:
    """A FastPath attribute that lives in the compiled core (its member of the same name)."""
    return property(lambda self: getattr(self.core, name), lambda self, v: setattr(self.core, name, v),
                    doc=f"FastPath.{name}, held by the compiled core")


class _CoreFastPath(FastPath):
    """A FastPath whose one-shot calls run in the compiled core, which holds the call count, `safe`, the
    pending root calls and the last call's shape (CORE_STATE; the Python paths read and write them here)."""

    f, safe, pend, pend_hi, last, run = (_in_core(k) for k in CORE_STATE)
