"""The compiled core of the host page's one-shot path (runtime/_hotcore.c), when it was built and is not
turned off: ``pip install`` compiles it where a C compiler exists (setup.py, an optional extension);
``INTERLINK_NO_CCORE=1`` runs the pure-Python path (runtime/oneshot.py) instead. `interlink doctor` shows
which one this install runs.

The core runs one call of a cached call shape (pageproto.Small) through the slots: the offsets it executes
are those of the Small's views, which FastPath.small derived from the call's Schedule. It takes all_reduce
and reduce_scatter of float32, float64, int32 and int64 (sum, product, min, max; avg of the floats),
broadcast, all_gather and all_to_all of any dtype, one-shot through the slots (not slots_once, not a page program);
every other shape runs in Python. It also runs the page programs that go through the slots alone
(``make_prog``: the two-phase all_reduce, ``slots`` above the inline limit; ``Core.prog``). Where the
Python path would sleep, time out or raise, the core hands the call back to Python at the same point
(OneShot.hot, PageProgram._program's resume), so waits, timeouts, blame and errors are the Python path's.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np

from ..ops import ReduceOp
from . import policy
from .engine import SPIN_WALL_S

try:
    from . import _hotcore
except ImportError:  # not built (no C compiler at install time): the pure-Python path
    _hotcore = None

_DT = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int32): 2, np.dtype(np.int64): 3}
_OP = {ReduceOp.SUM: 0, ReduceOp.PRODUCT: 1, ReduceOp.MIN: 2, ReduceOp.MAX: 3, ReduceOp.AVG: 0}
_KINDS = (0, 1, 2, 3, 5)  # AR, BC, AG, RS, A2A (pageproto)


def built() -> bool:
    """Whether this install has the compiled core."""
    return _hotcore is not None


def enabled() -> bool:
    """Whether calls run through it: built, and not turned off by INTERLINK_NO_CCORE=1."""
    return _hotcore is not None and os.environ.get("INTERLINK_NO_CCORE", "0") in ("", "0")


def status() -> str:
    """One line for `interlink doctor`."""
    if _hotcore is None:
        return "not built (no C compiler at install time): the host page's one-shot path runs in Python"
    if not enabled():
        return "built, turned off by INTERLINK_NO_CCORE=1: the host page's one-shot path runs in Python"
    return ("built and on: the host page's one-shot path and its page programs through the slots run in C "
            "(INTERLINK_NO_CCORE=1 turns it off)")


def _addr(x: np.ndarray) -> int:
    return x.__array_interface__["data"][0]


def make_core(fp: Any) -> Optional[Any]:
    """The core for FastPath fp (None: off, not built, or a page it does not run)."""
    if not enabled() or fp.n > 64:
        return None
    page = fp.page
    bell_w = [b.i for b in fp.bells]  # each peer's doorbell counter (u32 word)
    sleep_w = [flag for flag, _ in fp.wake]
    core = _hotcore.Core(page.mm, fp.n, fp.me, tuple(fp.my_w), tuple(tuple(w) for w in fp.peer_w),
                         fp.done_w, tuple(page.done_word(i) for i in range(fp.n)), tuple(fp.hoff),
                         tuple(sleep_w), tuple(bell_w), int(fp.spin), int(fp.yield_after), int(SPIN_WALL_S * 1e9),
                         *policy.slot_stream())
    fp._page_addr = _addr(np.frombuffer(page.mm, dtype=np.uint8, count=1))
    return core


def make_shape(fp: Any, sc: Any, op: ReduceOp, dtype: np.dtype) -> Optional[Any]:
    """The core's form of an inlined one-shot Small (None: a shape the core does not take)."""
    kind = sc.kind
    if kind not in _KINDS or sc.res is not None or sc.program is not None or sc.count == 0:
        return None
    code, opc = 9, 9
    if kind in (0, 3):
        code = _DT.get(dtype, 9)
        opc = _OP.get(op, 9)
        if code == 9 or opc == 9 or not dtype.isnative or (op is ReduceOp.AVG and code > 1):
            return None
    base = fp._page_addr

    def off(v: np.ndarray) -> int:
        if not v.flags.c_contiguous:
            raise ValueError("a slot view that is not contiguous")
        return _addr(v) - base

    if kind == 2:  # all_gather: every rank's row of the stack
        parts = [[off(st[i]) for i in range(fp.n)] for st in sc.stack]
    elif kind == 5:  # all_to_all: block `me` of every rank's slot (this rank's own: unused, read from its input)
        parts = [[off(st[i]) for i in range(fp.n)] for st in sc.stack]
    else:
        parts = [[off(v) for v in ps] for ps in sc.parts]
    mine = [off(m.reshape(-1)) if sc.sends else 0 for m in sc.mine]
    rootk = -1  # a broadcast's receiver: the root's index among the peers (it waits for the root alone)
    if kind == 1 and not sc.sends:
        rootk = sc.root - (sc.root > fp.me)
    return _hotcore.Shape(kind, opc, code, sc.count, dtype.itemsize, sc.nbytes, int(sc.sends), int(sc.avg),
                          sc.crc, sc.head, mine, parts, rootk, sc.depth, sc.lid)


def bind(group: Any) -> Optional[Any]:
    """Group._hot and Group._call_small folded for the group's cached shapes (None: no core, or a group
    that does not take the host page, or one that logs every call). A group whose _call_small is replaced
    on the instance (INTERLINK_TRACE's end times, benchmarks/recorder_overhead.py) runs that one."""
    fast = group._fast
    if fast is None or getattr(fast, "core", None) is None or group._trace:
        return None
    runner = group.ctx.runner
    return _hotcore.Bind(fast.core, fast, group.ctx, runner, runner._exec, fast.shapes, group._rplans,
                         group._rstarts, group._rseqs, group._rmask, group.__dict__)


def make_prog(fp: Any, sc: Any, op: ReduceOp, dtype: np.dtype, stream_out: bool, stream_slot: bool,
              measured: bool = False) -> Optional[Any]:
    """The core's form of a page program that runs through the slots alone (None: one the core does not run):
    every move's destination is this rank's input, output or slot, every source one of those or a peer's slot
    (no peer's own buffer, no put into a peer's output, no signal to wait for, no reader of this rank's
    buffers), no move with a local source that overlaps its destination: the
    two-phase all_reduce (``two_phase``) and ``slots`` above the inline limit. The encoding (read by
    _hotcore.c's core_prog): the first round's early moves, then the rounds from the first one with steps
    (each: its end, whether it publishes, the (peer, rounds) it waits for, its moves); a move is (destination,
    offset, count, sources, skipped: a no-op in place), a source (peer or -1, buffer, offset, reduce). A copy of the input into the slot
    that the peers may read from a mapped input instead (``elide``) is always made here: this rank says its
    input is not mapped. ``stream_out``, ``stream_slot``: the copies into the outputs, into this rank's slot
    stream (FastPath.small: the rule's, or the measured side's). ``measured``: the copies into the slot are
    measured plain against streaming as the one-shot path's are (_hotcore.c slot_lead; a shape the Python
    executor's measurement does not cover, and not a broadcast, whose root does not wait for its readers)."""
    from .pageplan import LOCAL, SCR, PutOp

    prog = sc.program
    if prog is None or sc.push is not None or prog.readers or prog.out_addr or not prog.scratch \
            or sc.count == 0 or not sc.stack:
        return None
    # all_reduce and broadcast run in place (the input is the output); the others only out of place, on buffers
    # that do not overlap (OneShot.hot): a copy that is a no-op in place is skipped in place and made otherwise
    same_out = sc.kind in (0, 1)
    code = _DT.get(dtype, 9)
    opc = 9
    if sc.kind in (0, 3):
        opc = _OP.get(op, 9)
        if code == 9 or opc == 9 or not dtype.isnative or (op is ReduceOp.AVG and code > 1):
            return None
        code_t = code
    else:
        code_t = 0  # moves copy only

    def moves(ops: Any) -> Optional[list]:
        out: list = []
        for m in ops:
            if isinstance(m, PutOp) or m.pushes:
                return None
            if any(s.peer != LOCAL and s.buf != SCR for s in m.srcs):
                return None
            if any(s.reduce for s in m.srcs) and opc == 9:
                return None
            if m.hazard and any(s.peer == LOCAL and (s.buf == m.buf or (same_out and s.buf != SCR and m.buf != SCR))
                                and s.off < m.off + m.count and m.off < s.off + m.count for s in m.srcs):
                return None  # a local source that overlaps the destination: the Python path's care
            out += [m.buf, m.off, m.count, len(m.srcs), int(m.noop and same_out)]
            for s in m.srcs:
                out += [s.peer if s.peer != LOCAL else -1, s.buf, s.off, int(s.reduce)]
        return out

    rounds = prog.rounds
    if not rounds or any(r.waits for r in rounds) or any(r.early for r in rounds[1:]):
        return None
    r0 = rounds[0]
    skip = 1 if not r0.ops and not r0.before and not r0.waits else 0
    early = moves(r0.early)
    if early is None:
        return None
    enc = [len(r0.early)] + early + [len(rounds) - skip]
    for r in rounds[skip:]:
        ms = moves(r.ops)
        if ms is None:
            return None
        enc += [r.end, int(r.publish), len(r.before)]
        for i, e in r.before:
            enc += [i, e]
        enc += [len(r.ops)] + ms
    base = fp._page_addr
    stack = [[_addr(st[i]) - base for i in range(fp.n)] for st in sc.stack]
    isz = dtype.itemsize
    outcount = sc.count * (fp.n if sc.kind == 2 else 1) // (fp.n if sc.kind == 3 else 1)
    desc = int(bool(prog.readers or prog.slot_readers or prog.out_addr))
    from ..transport import stream

    # the bytes a call copies into this rank's slot from its own buffers (what decides whether it is measured)
    slot_bytes = sum(m.count for r in rounds for m in r.early + r.ops if not isinstance(m, PutOp) and m.buf == SCR
                     and all(s.peer == LOCAL and s.buf != SCR for s in m.srcs)) * isz
    return _hotcore.Prog(code_t, opc if opc != 9 else 0, int(sc.avg), isz, sc.count, outcount, sc.nbytes, sc.crc,
                         sc.head, stack, [[fp.slot_w[i][q] for i in range(fp.n)] for q in (0, 1)], list(prog.maps),
                         enc, desc, skip, int(r0.publish), r0.end, max(1, 2 * fp.chunk // isz), stream.MIN_BYTES,
                         int(bool(stream_out)), int(bool(stream_slot)), int(same_out),
                         int(measured and sc.kind != 1), slot_bytes, sc.lid, sc.depth, int(sc.sends))
