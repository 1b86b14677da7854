"""Soak: thousands of pseudo-random interlink calls on real ranks, every result checked against numpy.

    python benchmarks/soak.py [--ranks 4] [--calls 3000] [--transport shm,tcp] [--seed 1]
                              [--groups "0,1;1,2,3;0,2"] [--call-timeout 60] [--json out.json]
                              [--replay STEP[,STEP...]]

N ranks are started as real processes on this host (spawned, like tests/mp.py) over shared memory (the
default) and over TCP (INTERLINK_TRANSPORT=tcp). Every rank walks the same seeded sequence of steps:

* a collective on one group: all_reduce (SUM/PRODUCT/MIN/MAX/AVG, and BAND/BOR/BXOR on integers),
  broadcast, reduce, all_gather_into_tensor (out of place and with inp = out[r*n:(r+1)*n]), all_gather
  (list form, also with the tensor as its own slot), reduce_scatter_tensor (out of place and with
  out = inp[r*n:(r+1)*n]), all_to_all_single (even, and with split sizes on 1-D and 2-D tensors), gather,
  scatter, barrier;
* blocking send/recv pairs;
* a batch of async calls (async_op=True collectives on several groups, isend/irecv pairs) that each rank
  waits for in its own shuffled order;

over the world and the subgroups of --groups (every rank calls new_group for every group, in the same
order, members or not), in float32/float64/int32/int64/float16 (and bfloat16 when ml_dtypes imports),
with buffers that are plain arrays, slices of a larger array with guard elements around them, or
interlink.empty arrays. Sizes: 0, 1, primes, 1K..4M elements, and above all the sizes next to every
threshold `path_thresholds()` reports for the group (the path limits of the shared page, the rings, the
one-copy thresholds, the algorithm switch points), so every path the runtime has is taken.

A step is a pure function of (seed, step index, world size, groups, thresholds): every rank regenerates
every other rank's input, so each checks its own outputs (and that inputs and guards are unchanged)
with numpy, with no extra communication. The data are small integers, so sums and products are exact
in every dtype (AVG of floats: within the rounding of one division).

Hangs: every call runs under a timeout (init(timeout=) for all, the call's timeout= on half of them,
Work.wait(timeout=) for async ones), and the parent's watchdog kills a world in which no rank made
progress for --call-timeout + 30 s. After an error or a hang the world is restarted after the failed
step (at most --max-restarts times): the report names the step, each rank's error and the call.

--replay STEP,... runs only those steps (same seed, ranks, groups and transport): the reproduction of a
reported failure. Exit status: 0 when every call completed with the right result, 1 otherwise.

--faults N: a lost rank every N calls. At a fault step a rank drawn from the seed (rank 0 too) makes its
first call of the step and SIGKILLs itself, with that call possibly in flight; the survivors finish or
fail the step (a call that completes is checked like any other; one that raises PeerLostError is counted
as interrupted), call interlink.shrink() without naming the rank (they agree on who is lost; a shrink
that leaves out another set is an error), make their subgroups again on the shrunk world (the old
groups' members renumbered, groups of fewer than 2 dropped) and go on with the next step. A world of
--ranks ranks takes --ranks - 2 faults, then runs N more calls and a fresh world starts. Steps are the
same function of (seed, step, world, groups, thresholds) as without faults, on the shrunk world's.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import math
import multiprocessing as mp
import os
import queue
import secrets
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np

from interlink.bench.peers import machine
from interlink.launch.local import free_port

# ---- the call mix ------------------------------------------------------------------------------------

COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather_into_tensor", "all_gather",
               "reduce_scatter_tensor", "all_to_all_single", "gather", "scatter", "barrier")
WEIGHTS = (4.0, 1.0, 1.0, 1.5, 1.0, 1.5, 1.5, 1.0, 1.0, 0.5)
PER_RANK = frozenset({"all_gather_into_tensor", "all_gather", "reduce_scatter_tensor", "all_to_all_single",
                      "gather", "scatter"})
REDUCING = frozenset({"all_reduce", "reduce", "reduce_scatter_tensor"})
BASE_DTYPES = ("float32", "float64", "int32", "int64", "float16")
FLOAT_OPS = ("sum", "product", "min", "max", "avg")
INT_OPS = FLOAT_OPS + ("band", "bor", "bxor")
PRIMES = (2, 3, 5, 7, 13, 31, 61, 127, 251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071,
          262139, 524287, 1048573)
DEFAULT_GROUPS = "0,1;1,2,3;0,2"
GUARD = 5  # elements each side of a slice buffer
SYNC, P2P, ASYNC = "sync", "p2p", "async"

#: seconds between two progress lines of a running world (run_segment)
PROGRESS_S = 10.0


def have_bfloat16() -> bool:
    try:
        import ml_dtypes  # noqa: F401

        return True
    except ImportError:
        return False


def np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def is_float(name: str) -> bool:
    return name.startswith("float") or name == "bfloat16"


@dataclass
class Cfg:
    """What every rank and the parent must agree on to generate the same steps."""

    seed: int
    world: int
    groups: list  # list of tuples of global ranks; groups[0] is the world
    dtypes: list
    max_elems: int
    call_timeout: float
    corrupt: Optional[int] = None  # hidden: rank 0 flips one checked element from this step on
    fault: Optional[str] = None  # hidden, tests of the watchdog: "skip:STEP" (the last rank skips its
    # calls of that step: its peers time out) or "stall:STEP" (every rank sleeps there: no progress)
    hang_after: Optional[float] = None  # the watchdog's limit without progress (default call_timeout + 30)
    faults: int = 0  # a rank SIGKILLed every this many calls, the survivors shrink (0: none)


@dataclass
class OpSpec:
    kind: str  # a COLLECTIVES name, or "send/recv" / "isend/irecv"
    group: int  # index into Cfg.groups
    dtype: str = "float32"
    count: int = 0  # elements: the whole tensor, or one rank's block (PER_RANK)
    op: str = ""
    root: int = 0  # group rank (p2p: the sender)
    peer: int = 0  # p2p: the receiver (group rank)
    tag: int = 0
    variant: str = ""  # "inplace", "splits", "slot"
    alloc: str = "plain"  # plain | slice | empty
    timeout: bool = False  # pass timeout= explicitly (off the latency path)
    width: int = 1  # all_to_all with splits: elements per row
    splits: Optional[list] = None  # all_to_all with splits: rows group rank i sends to group rank j

    def describe(self, cfg: Cfg) -> str:
        g = list(cfg.groups[self.group])
        s = f"{self.kind} group={g} dtype={self.dtype} n={self.count}"
        if self.op:
            s += f" op={self.op}"
        if self.kind in ("broadcast", "reduce", "gather", "scatter"):
            s += f" root={g[self.root]}"
        if self.kind in ("send/recv", "isend/irecv"):
            s += f" {g[self.root]}->{g[self.peer]} tag={self.tag}"
        if self.variant:
            s += f" {self.variant}"
        if self.splits is not None:
            s += f" splits={self.splits} width={self.width}"
        s += f" alloc={self.alloc}" + (" timeout=explicit" if self.timeout else "")
        return s


@dataclass
class Step:
    index: int
    mode: str
    ops: list


def step_shape(seed: int, i: int) -> tuple[str, int]:
    """(mode, number of calls) of step i: what the parent needs to count calls without thresholds."""
    r = np.random.default_rng([seed, i, 0])
    u = r.random()
    if u < 0.66:
        return SYNC, 1
    if u < 0.78:
        return P2P, int(r.integers(1, 3))
    return ASYNC, int(r.integers(2, 7))


def draw_count(r: np.random.Generator, thr: list, itemsize: int, cap: int) -> int:
    """Elements: 0/1, a prime, a size next to one of the group's thresholds, or log-uniform 1K..4M."""
    u = r.random()
    if u < 0.08:
        m = int(r.integers(0, 2))
    elif u < 0.22:
        m = int(r.choice(PRIMES))
    elif u < 0.72 and thr:
        t = int(r.choice(thr))
        m = t // itemsize + int(r.choice((-1, 0, 0, 1, 1, -2, 3)))
    else:
        m = int(math.exp(r.uniform(math.log(1024), math.log(4 << 20))))
    return max(0, min(m, cap))


def make_step(cfg: Cfg, i: int, thresholds: dict) -> Step:
    """Step i of the soak: the same on every rank (and in the parent, which describes failures)."""
    mode, nops = step_shape(cfg.seed, i)
    r = np.random.default_rng([cfg.seed, i, 1])
    ops = []
    for _ in range(nops):
        p2p = mode == P2P or (mode == ASYNC and r.random() < 0.25)
        if mode == ASYNC and p2p:
            kind = "isend/irecv"
        elif p2p:
            kind = "send/recv"
        else:
            w = np.array(WEIGHTS)
            kind = COLLECTIVES[int(r.choice(len(COLLECTIVES), p=w / w.sum()))]
        gi = 0 if (len(cfg.groups) == 1 or r.random() < 0.5) else int(r.integers(1, len(cfg.groups)))
        members = cfg.groups[gi]
        p = len(members)
        dt = cfg.dtypes[int(r.integers(len(cfg.dtypes)))]
        itemsize = np_dtype(dt).itemsize
        thr = sorted(set(thresholds.get(gi, {}).values()))
        m = draw_count(r, thr, itemsize, cfg.max_elems)
        spec = OpSpec(kind, gi, dt)
        spec.alloc = str(r.choice(["plain", "plain", "plain", "plain", "slice", "empty"]))
        spec.timeout = bool(r.random() < 0.5) and not p2p
        if kind in PER_RANK:
            n = m if r.random() < 0.5 else m // p  # the threshold hits one rank's block, or the whole
            spec.count = min(n, cfg.max_elems // p)
        else:
            spec.count = m
        if kind in REDUCING:
            ops_ = INT_OPS if dt.startswith("int") else FLOAT_OPS
            spec.op = str(r.choice(ops_))
        if kind in ("broadcast", "reduce", "gather", "scatter"):
            spec.root = int(r.integers(p))
        if kind in ("all_gather_into_tensor", "reduce_scatter_tensor") and r.random() < 0.4:
            spec.variant = "inplace"
        if kind in ("all_gather", "gather", "scatter") and r.random() < 0.3:
            spec.variant = "slot"  # the caller's tensor is its own slot of the list
        if kind == "all_to_all_single" and r.random() < 0.5:
            spec.variant = "splits"
            spec.width = int(r.choice([1, 1, 3]))
            hi = max(1, (spec.count * p) // (p * p * spec.width)) * 2
            S = r.integers(0, hi + 1, (p, p))
            if r.random() < 0.15:
                S[int(r.integers(p)), :] = 0  # a rank that sends nothing
            spec.splits = S.tolist()
        if p2p:
            a, b = r.choice(p, 2, replace=False)
            spec.root, spec.peer = int(a), int(b)
            spec.tag = int(r.integers(0, 1000))
        if kind == "barrier":
            spec.count, spec.dtype = 0, "float32"
        ops.append(spec)
    return Step(i, mode, ops)


# ---- data: every rank's input, regenerable anywhere, any slice ----------------------------------------
#
# One random pool per kind of value, made once per process from a fixed seed; rank r's input for call j
# of a step is the pool read from an offset that depends on (seed, step, j) and on r, so every rank can
# regenerate any slice of any rank's input without generating anything (the checks stay cheap next to
# the calls). The ranks' offsets of one call are a + (r + 1) * b mod 2^20 with a random and b random and
# odd: never equal, and the shift between two ranks' windows is random (not a size the soak draws).

_POOLS: dict = {}
_SPAN = 1 << 20  # offsets are in [0, _SPAN)


def _pool(kind: str, dtype: str, n: int) -> np.ndarray:
    """The pool of one kind of value in one dtype (made once per process, read-only)."""
    key = (kind, dtype)
    have = _POOLS.get(key)
    if have is not None and len(have) >= n + _SPAN:
        return have
    r = np.random.default_rng(20240613)
    m = max(n, 1 << 20) + _SPAN
    if kind == "bits":
        pool = r.integers(-(1 << 63), (1 << 63) - 1, m, dtype=np.int64, endpoint=True)
    elif kind == "product":
        pool = r.choice(np.array([1, -1, 2, -2], dtype=np.int8), m)
    elif kind == "minmax":
        pool = r.integers(-100, 101, m, dtype=np.int16)
    else:
        pool = r.integers(-8, 9, m, dtype=np.int8)
    if dtype == "bfloat16":
        pool = pool.astype(np.float32)
    pool = pool.astype(np_dtype(dtype))  # int64 bits -> int32 keeps the low bits
    pool.flags.writeable = False
    _POOLS[key] = pool
    return pool


def _offset(seed: int, step: int, j: int, grank: int, salt: int) -> int:
    h = hashlib.blake2b(repr((seed, step, j, salt)).encode(), digest_size=16).digest()
    a, b = int.from_bytes(h[:8], "little"), int.from_bytes(h[8:], "little") | 1
    return (a + (grank + 1) * b) % _SPAN


def values(cfg: Cfg, step: int, j: int, grank: int, salt: int, lo: int, hi: int, dtype: str, op: str) -> np.ndarray:
    """Elements [lo, hi) of global rank grank's input for call j of step: small integers (products of
    +-1/+-2, min/max in [-100, 100], sums in [-8, 8], any bits for bitwise ops)."""
    kind = "bits" if op in ("band", "bor", "bxor") else op if op in ("product",) else \
        "minmax" if op in ("min", "max") else "small"
    o = _offset(cfg.seed, step, j, grank, salt)
    return _pool(kind, dtype, max(hi, cfg.max_elems))[o + lo:o + hi]  # a read-only view


_UF = {"sum": np.add, "avg": np.add, "product": np.multiply, "min": np.minimum, "max": np.maximum,
       "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}


def reduced(parts: list, dtype: str, op: str) -> np.ndarray:
    """numpy's reduction in rank order. Exact in the dtype for the values above (|sums| <= 8p, products
    of +-1/+-2, min/max of integers); AVG divides the sum in float64 (integers: truncated toward zero)."""
    dt = np_dtype(dtype)
    acc = np.array(parts[0], dtype=dt, copy=True)
    for x in parts[1:]:
        _UF[op](acc, x, out=acc)
    if op == "avg":
        p = len(parts)
        if dtype.startswith("int"):
            wide = acc.astype(np.int64)
            acc = (np.sign(wide) * (np.abs(wide) // p)).astype(dt)
        else:
            acc = (acc.astype(np.float64) / p).astype(dt)
    return acc


def compare(got: np.ndarray, want: np.ndarray, dtype: str, op: str) -> Optional[dict]:
    """None when equal, else what differs."""
    if got.shape != want.shape:
        return {"wrong": -1, "detail": f"shape {got.shape} != {want.shape}"}
    if got.size == 0:
        return None
    if op == "avg" and is_float(dtype):
        g, w = got.astype(np.float64), want.astype(np.float64)
        tol = 1e-2 if dtype in ("float16", "bfloat16") else 1e-6
        ok = np.abs(g - w) <= tol * np.maximum(1.0, np.abs(w))
    else:
        ok = got == want  # exact (floats: the values are small integers; NaN garbage compares unequal)
    if ok.all():
        return None
    bad = np.flatnonzero(~ok.reshape(-1))
    k = int(bad[0])
    return {"wrong": int(bad.size), "of": int(ok.size), "first": k,
            "got": repr(got.reshape(-1)[k].item()), "want": repr(want.reshape(-1)[k].item()),
            "wrong_at": [int(x) for x in bad[:8]]}


# ---- one rank ---------------------------------------------------------------------------------------


class Buffers:
    def __init__(self, dtype: str) -> None:
        self.dt = np_dtype(dtype)
        self.guards: list = []

    def new(self, n: int, alloc: str) -> np.ndarray:
        if alloc == "empty" and n > 0:
            import interlink

            return interlink.empty(n, self.dt)
        if alloc == "slice":
            base = np.empty(n + 2 * GUARD, self.dt)
            base.view(np.uint8)[...] = 0x3C
            self.guards.append(base)
            return base[GUARD:GUARD + n]
        return np.empty(n, self.dt)

    def guard_ok(self) -> bool:
        return all((b[:GUARD].view(np.uint8) == 0x3C).all() and (b[len(b) - GUARD:].view(np.uint8) == 0x3C).all()
                   for b in self.guards)


def _garbage(a: np.ndarray) -> None:
    if a.size:
        a.view(np.uint8)[...] = 0xA5


@dataclass
class RankStats:
    calls: int = 0  # calls this rank took part in
    wrong: int = 0
    wrong_details: list = field(default_factory=list)
    mix: dict = field(default_factory=dict)  # this rank's calls per collective (variant)
    by_dtype: dict = field(default_factory=dict)
    by_group: dict = field(default_factory=dict)
    paths: dict = field(default_factory=dict)  # "collective:path" -> calls (counted by group rank 0)
    sizes: dict = field(default_factory=dict)  # size class -> calls
    loop_s: float = 0.0
    call_s: float = 0.0  # time inside interlink's calls and waits (the rest: making and checking data)
    corrupted: int = 0
    shrinks: int = 0  # --faults: shrinks this rank took part in
    interrupted: int = 0  # --faults: fault steps whose calls raised PeerLostError here


def _size_class(n: int) -> str:
    if n <= 1:
        return str(n)
    if n < 1024:
        return "2..1023"
    if n < 65536:
        return "1K..64K"
    if n < 1 << 20:
        return "64K..1M"
    return "1M..4M"


class _Timed:
    """The interlink module, timing every call made through it."""

    def __init__(self, mod: Any) -> None:
        self.mod, self.t = mod, 0.0

    def __getattr__(self, name: str) -> Any:
        f = getattr(self.mod, name)

        def timed(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                self.t += time.perf_counter() - t

        return timed


class RankRunner:
    """Runs steps on one rank: makes the calls, waits, checks."""

    def __init__(self, dist: Any, cfg: Cfg, rank: int, groups: list) -> None:
        self.dist, self.cfg, self.rank, self.groups = _Timed(dist), cfg, rank, groups
        self.stats = RankStats()
        self.corrupt_done = False
        self.die_at: Optional[int] = None  # --faults: the step in which this rank kills itself
        self.die: Any = None

    def run_step(self, step: Step) -> None:
        cfg, rank = self.cfg, self.rank
        if cfg.fault:
            kind, _, at = cfg.fault.partition(":")
            if int(at) == step.index:
                if kind == "stall":
                    time.sleep(1e6)
                if kind == "skip" and rank == cfg.world - 1:
                    return
        pending = []  # (op index, spec, works, checks, seq of the call in its group or None)
        # nothing is in flight between steps: each collective of this step takes its group's next
        # sequence number in call order (the flight recorder names the path it took under that number)
        seqs = {gi: g.seq for gi, g in enumerate(self.groups) if g is not None}
        for j, spec in enumerate(step.ops):
            members = cfg.groups[spec.group]
            if rank not in members:
                continue
            if spec.kind in ("send/recv", "isend/irecv") and rank not in (members[spec.root], members[spec.peer]):
                continue
            works, checks = self.call(step, j, spec, asyn=(step.mode == ASYNC))
            if self.die_at == step.index:
                self.die()  # SIGKILL after this rank's first call of the step (it may be in flight)
            seq = None
            if spec.kind not in ("send/recv", "isend/irecv"):
                seqs[spec.group] += 1
                seq = seqs[spec.group]
            pending.append((j, spec, works, checks, seq))
            self._count(spec)
        if self.die_at == step.index:
            self.die()  # no call of this step involved this rank
        if step.mode == ASYNC:
            order = [w for q in pending for w in q[2]]
            np.random.default_rng([cfg.seed, step.index, 2, rank]).shuffle(order)
            t = time.perf_counter()
            for w in order:
                w.wait(timeout=cfg.call_timeout)
            self.dist.t += time.perf_counter() - t
        for j, spec, _, checks, seq in pending:
            self._path(spec, seq)
            self._check(step, j, spec, checks, seq)

    def _count(self, spec: OpSpec) -> None:
        st = self.stats
        st.calls += 1
        name = spec.kind + (f" ({spec.variant})" if spec.variant else "")
        st.mix[name] = st.mix.get(name, 0) + 1
        if spec.op:
            k = f"{spec.kind}.{spec.op}"
            st.mix[k] = st.mix.get(k, 0) + 1
        st.by_dtype[spec.dtype] = st.by_dtype.get(spec.dtype, 0) + 1
        gname = ",".join(map(str, self.cfg.groups[spec.group]))
        st.by_group[gname] = st.by_group.get(gname, 0) + 1
        sc = _size_class(spec.count)
        st.sizes[sc] = st.sizes.get(sc, 0) + 1

    def _sig(self, spec: OpSpec, seq: Optional[int]) -> str:
        if seq is None:
            return ""
        for rec in reversed(self.groups[spec.group].recorder):
            if rec.seq == seq:
                return rec.sig
        return ""

    def _path(self, spec: OpSpec, seq: Optional[int]) -> None:
        if seq is None or self.cfg.groups[spec.group][0] != self.rank:
            return
        sig = self._sig(spec, seq)
        k = sig.split(" ")[0] if sig else f"{spec.kind}:?"
        self.stats.paths[k] = self.stats.paths.get(k, 0) + 1

    def _check(self, step: Step, j: int, spec: OpSpec, checks: list, seq: Optional[int]) -> None:
        cfg = self.cfg
        if cfg.corrupt is not None and self.rank == 0 and not self.corrupt_done and step.index >= cfg.corrupt:
            for _what, got, _want, _op in checks:
                if isinstance(got, np.ndarray) and got.size:
                    b = got.reshape(-1)[:1].view(np.uint8)
                    b[got.dtype.itemsize - 1] ^= 0x40  # the top byte: sign/exponent of floats, high bits of ints
                    self.corrupt_done = True
                    self.stats.corrupted += 1
                    break
        problems = []
        for what, got, want, op in checks:
            w = want() if callable(want) else want
            got = got() if callable(got) else got
            if what == "guards":
                if not w:
                    problems.append({"buffer": "guard elements around a slice were written"})
                continue
            if what == "recv src":
                if got != w:
                    problems.append({"buffer": what, "got": got, "want": w})
                continue
            d = compare(got, w, spec.dtype, op)
            if d is not None:
                d["buffer"] = what
                problems.append(d)
        if problems:
            self.stats.wrong += 1
            if len(self.stats.wrong_details) < 5:
                self.stats.wrong_details.append({"step": step.index, "call": j, "mode": step.mode, "rank": self.rank,
                                                 "what": spec.describe(cfg), "path": self._sig(spec, seq),
                                                 "problems": problems[:3]})

    def call(self, step: Step, j: int, spec: OpSpec, asyn: bool) -> tuple[list, list]:
        """Make this rank's part of one call. Returns (works to wait for, checks): each check is
        (what, got array, want array or a function computing it, op for the comparison)."""
        d, cfg, rank = self.dist, self.cfg, self.rank
        members = cfg.groups[spec.group]
        p, me = len(members), members.index(rank)
        grp = None if spec.group == 0 else self.groups[spec.group]
        n, dt, op, kind = spec.count, spec.dtype, spec.op, spec.kind
        B = Buffers(dt)
        kw: dict = {"group": grp}
        if asyn:
            kw["async_op"] = True
        if spec.timeout:
            kw["timeout"] = cfg.call_timeout

        def D(grank: int, lo: int, hi: int, salt: int = 0) -> np.ndarray:
            return values(cfg, step.index, j, grank, salt, lo, hi, dt, op)

        def new(size: int, data: Optional[np.ndarray] = None) -> np.ndarray:
            a = B.new(size, spec.alloc)
            if data is None:
                _garbage(a)
            else:
                a[...] = data
            return a

        checks: list = []
        w = None
        root_g = members[spec.root]
        if kind == "all_reduce":
            x = new(n, D(rank, 0, n))
            w = d.all_reduce(x, op=op, **kw)
            checks.append(("tensor", x, lambda: reduced([D(r, 0, n) for r in members], dt, op), op))
        elif kind == "broadcast":
            x = new(n, D(rank, 0, n))
            w = d.broadcast(x, src=root_g, **kw)
            checks.append(("tensor", x, lambda: D(root_g, 0, n), ""))
        elif kind == "reduce":
            x = new(n, D(rank, 0, n))
            w = d.reduce(x, dst=root_g, op=op, **kw)
            if me == spec.root:
                checks.append(("tensor", x, lambda: reduced([D(r, 0, n) for r in members], dt, op), op))
            else:
                checks.append(("tensor (non-root: untouched)", x, lambda: D(rank, 0, n), ""))
        elif kind == "all_gather_into_tensor":
            out = new(n * p)
            if spec.variant == "inplace":
                inp = out[me * n:(me + 1) * n]
                inp[...] = D(rank, 0, n)
            else:
                inp = new(n, D(rank, 0, n))
                checks.append(("input (unchanged)", inp, lambda: D(rank, 0, n), ""))
            w = d.all_gather_into_tensor(out, inp, **kw)
            checks.insert(0, ("output", out, lambda: np.concatenate([D(r, 0, n) for r in members]), ""))
        elif kind == "all_gather":
            inp = new(n, D(rank, 0, n))
            outs = [new(n) for _ in range(p)]
            if spec.variant == "slot":
                outs[me] = inp
            else:
                checks.append(("input (unchanged)", inp, lambda: D(rank, 0, n), ""))
            w = d.all_gather(outs, inp, **kw)
            for k in range(p):
                checks.insert(k, (f"tensor_list[{k}]", outs[k], (lambda k=k: D(members[k], 0, n)), ""))
        elif kind == "reduce_scatter_tensor":
            inp = new(n * p, D(rank, 0, n * p))
            want = lambda: reduced([D(r, me * n, (me + 1) * n) for r in members], dt, op)  # noqa: E731
            if spec.variant == "inplace":
                out = inp[me * n:(me + 1) * n]
                rest = lambda: np.concatenate([inp[:me * n], inp[(me + 1) * n:]])  # noqa: E731
                w = d.reduce_scatter_tensor(out, inp, op=op, **kw)
                checks.append(("output", out, want, op))
                checks.append(("input outside the output block (unchanged)", rest,
                               lambda: np.concatenate([D(rank, 0, me * n), D(rank, (me + 1) * n, n * p)]), ""))
            else:
                out = new(n)
                w = d.reduce_scatter_tensor(out, inp, op=op, **kw)
                checks.append(("output", out, want, op))
                checks.append(("input (unchanged)", inp, lambda: D(rank, 0, n * p), ""))
        elif kind == "all_to_all_single":
            if spec.variant == "splits":
                S, wd = spec.splits, spec.width
                irows, orows = sum(S[me]), sum(S[k][me] for k in range(p))
                inp = new(irows * wd, D(rank, 0, irows * wd))
                out = new(orows * wd)
                ai, ao = (inp, out) if wd == 1 else (inp.reshape(irows, wd), out.reshape(orows, wd))
                w = d.all_to_all_single(ao, ai, output_split_sizes=[S[k][me] for k in range(p)],
                                        input_split_sizes=list(S[me]), **kw)

                def want_v() -> np.ndarray:
                    parts = []
                    for k in range(p):
                        lo = sum(S[k][:me]) * wd
                        parts.append(D(members[k], lo, lo + S[k][me] * wd))
                    return np.concatenate(parts)

                checks.append(("output", out, want_v, ""))
                checks.append(("input (unchanged)", inp, lambda: D(rank, 0, irows * wd), ""))
            else:
                inp = new(n * p, D(rank, 0, n * p))
                out = new(n * p)
                w = d.all_to_all_single(out, inp, **kw)
                checks.append(("output", out,
                               lambda: np.concatenate([D(r, me * n, (me + 1) * n) for r in members]), ""))
                checks.append(("input (unchanged)", inp, lambda: D(rank, 0, n * p), ""))
        elif kind == "gather":
            inp = new(n, D(rank, 0, n))
            outs = None
            if me == spec.root:
                outs = [new(n) for _ in range(p)]
                if spec.variant == "slot":
                    outs[me] = inp
                for k in range(p):
                    checks.append((f"gather_list[{k}]", outs[k], (lambda k=k: D(members[k], 0, n)), ""))
            if not (me == spec.root and spec.variant == "slot"):
                checks.append(("input (unchanged)", inp, lambda: D(rank, 0, n), ""))
            w = d.gather(inp, outs, dst=root_g, **kw)
        elif kind == "scatter":
            out = new(n)
            ins = None
            if me == spec.root:
                ins = [new(n, D(members[k], 0, n, 1)) for k in range(p)]
                if spec.variant == "slot":
                    out[...] = ins[me]
                    ins[me] = out
                for k in range(p):
                    if not (spec.variant == "slot" and k == me):
                        checks.append((f"scatter_list[{k}] (unchanged)", ins[k],
                                       (lambda k=k: D(members[k], 0, n, 1)), ""))
            w = d.scatter(out, ins, src=root_g, **kw)
            checks.insert(0, ("tensor", out, lambda: D(rank, 0, n, 1), ""))
        elif kind == "barrier":
            w = d.barrier(**kw)
        elif kind in ("send/recv", "isend/irecv"):
            src, dst = members[spec.root], members[spec.peer]
            pkw = {"group": grp, "tag": spec.tag}
            if rank == src:
                x = new(n, D(src, 0, n))
                if asyn:
                    w = d.isend(x, dst, **pkw)
                else:
                    d.send(x, dst, **pkw)
                checks.append(("sent tensor (unchanged)", x, lambda: D(src, 0, n), ""))
            else:
                y = new(n)
                if asyn:
                    w = d.irecv(y, src, **pkw)
                else:
                    got = d.recv(y, src, **pkw)
                    checks.append(("recv src", got, src, ""))
                checks.insert(0, ("received", y, lambda: D(src, 0, n), ""))
        else:
            raise ValueError(f"unknown call {kind}")
        checks.append(("guards", None, B.guard_ok, ""))
        return ([w] if w is not None else []), checks


def _worker(rank: int, world: int, env: dict, cfg: Cfg, inq: Any, outq: Any, progress: Any) -> None:
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    try:
        import interlink as dist

        world_g = dist.init(timeout=cfg.call_timeout, init_timeout=120.0)
        groups = [world_g]
        thr = {0: world_g.path_thresholds()}
        for gi, ranks in enumerate(cfg.groups[1:], 1):
            h = dist.new_group(list(ranks))  # every rank, member or not, in the same order
            groups.append(h if rank in ranks else None)
            if rank in ranks:
                thr[gi] = h.path_thresholds()
        outq.put(("ready", rank, thr))
    except BaseException as e:  # noqa: BLE001
        outq.put(("fail", rank, {"step": -1, "type": type(e).__name__, "msg": str(e)[:2000],
                                 "tb": traceback.format_exc()[-3000:]}, None))
        return
    msg = inq.get()
    if msg is None:
        dist.destroy()
        return
    steps, thresholds, faults = msg
    rr = RankRunner(dist, cfg, rank, groups)
    i = -1
    t0 = time.perf_counter()
    try:
        for i in steps:
            progress[rank] = i
            if i in faults:
                rr, thresholds = _fault_step(dist, rr, i, thresholds, rank, outq)
                continue
            rr.run_step(make_step(rr.cfg, i, thresholds))
        progress[rank] = 1 << 40
        rr.stats.loop_s = time.perf_counter() - t0
        rr.stats.call_s = rr.dist.t
        outq.put(("done", rank, None, rr.stats))
    except BaseException as e:  # noqa: BLE001 - the communicator is broken now: report and leave
        rr.stats.loop_s = time.perf_counter() - t0
        rr.stats.call_s = rr.dist.t
        outq.put(("fail", rank, {"step": i, "type": type(e).__name__, "msg": str(e)[:3000],
                                 "tb": traceback.format_exc()[-3000:]}, rr.stats))
        outq.close()
        outq.join_thread()
        os._exit(3)
    try:
        dist.destroy()
    except BaseException:  # noqa: BLE001
        pass


def _victim(cfg: Cfg, step: int) -> int:
    """The rank (of the current world) that dies at fault step ``step``."""
    return int(np.random.default_rng([cfg.seed, step, 9]).integers(cfg.world))


def _shrunk_cfg(cfg: Cfg, victim: int) -> Cfg:
    """The steps' configuration on the survivors' world: ranks renumbered, groups of fewer than 2 dropped."""
    import dataclasses

    new = {r: i for i, r in enumerate(r for r in range(cfg.world) if r != victim)}
    groups = [tuple(range(cfg.world - 1))]
    for g in cfg.groups[1:]:
        m = tuple(new[x] for x in g if x != victim)
        if len(m) >= 2:
            groups.append(m)
    return dataclasses.replace(cfg, world=cfg.world - 1, groups=groups)


def _fault_step(dist: Any, rr: "RankRunner", i: int, thresholds: dict, rank: int, outq: Any) -> tuple:
    """--faults: step i with a rank dying in it; the survivors shrink and return (runner, thresholds) of the
    shrunk world."""
    from interlink.errors import PeerLostError

    cfg = rr.cfg
    victim = _victim(cfg, i)
    if rr.rank == victim:
        def die() -> None:
            outq.put(("killed", rank, {"step": i, "time": time.time()}, rr.stats))
            outq.close()
            outq.join_thread()
            os.kill(os.getpid(), 9)

        rr.die, rr.die_at = die, i
    try:
        rr.run_step(make_step(cfg, i, thresholds))
    except PeerLostError:
        rr.stats.interrupted += 1
    g = dist.shrink()
    if list(g.lost) != [victim]:
        raise RuntimeError(f"step {i}: shrink left out ranks {list(g.lost)}, rank {victim} was killed")
    new = _shrunk_cfg(cfg, victim)
    groups: list = [g]
    for m in new.groups[1:]:
        h = dist.new_group(list(m))
        groups.append(h if g.rank in m else None)
    mine = {gi: h.path_thresholds() for gi, h in enumerate(groups) if h is not None}
    every: list = [None] * g.size
    dist.all_gather_object(every, mine)
    thr = {gi: every[m[0]][gi] for gi, m in enumerate(new.groups)}  # as the parent merges them: the lowest member's
    nxt = RankRunner(dist, new, g.rank, groups)
    nxt.dist, nxt.stats = rr.dist, rr.stats
    nxt.stats.shrinks += 1
    return nxt, thr


# ---- the parent -------------------------------------------------------------------------------------


def merge_thresholds(cfg: Cfg, reports: dict) -> tuple[dict, list]:
    """Per group: the thresholds its lowest member reported; a note when members disagree."""
    out, notes = {}, []
    for gi, members in enumerate(cfg.groups):
        seen = [reports[r][gi] for r in members if r in reports and gi in reports[r]]
        if seen:
            out[gi] = seen[0]
            if any(s != seen[0] for s in seen[1:]):
                notes.append(f"group {list(members)}: members report different thresholds")
    return out, notes


@dataclass
class Segment:
    status: str  # ok | fail | hang | init
    stats: dict  # rank -> RankStats
    fails: dict  # rank -> fail info
    progress: list
    loop_s: float
    thresholds: dict
    killed: dict = field(default_factory=dict)  # --faults: rank -> {"step", "time"} of its injected death


def run_segment(cfg: Cfg, transport: str, steps: list, init_timeout: float = 180.0,
                hang_s: Optional[float] = None, faults: tuple = (), log: Any = None) -> Segment:
    """One world of cfg.world ranks runs the given steps (``faults``: the steps in which a rank dies, the
    survivors shrinking). Returns what every rank reported; ``log`` gets a progress line every
    PROGRESS_S seconds (the step the slowest rank is at, the time left at the pace so far)."""
    ctx = mp.get_context("spawn")
    env: dict = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                 "INTERLINK_SECRET": secrets.token_hex(16),
                 "INTERLINK_TRANSPORT": "tcp" if transport == "tcp" else None}
    outq = ctx.Queue()
    inqs = [ctx.Queue() for _ in range(cfg.world)]
    progress = ctx.Array("q", [-1] * cfg.world, lock=False)
    procs = [ctx.Process(target=_worker, args=(r, cfg.world, env, cfg, inqs[r], outq, progress), daemon=True)
             for r in range(cfg.world)]
    for pr in procs:
        pr.start()
    hang_s = hang_s if hang_s is not None else cfg.hang_after if cfg.hang_after else cfg.call_timeout + 30.0
    stats: dict = {}
    fails: dict = {}
    killed: dict = {}
    ready: dict = {}
    thresholds: dict = {}
    status = "ok"
    t_run = None
    try:
        deadline = time.monotonic() + init_timeout
        while len(ready) < cfg.world and not fails:
            try:
                kind, rank, val, *rest = outq.get(timeout=0.5)
            except queue.Empty:
                if time.monotonic() > deadline or any(pr.exitcode is not None for pr in procs):
                    status = "init"
                    break
                continue
            if kind == "ready":
                ready[rank] = val
            else:
                fails[rank] = val
        if len(ready) < cfg.world:
            for r in range(cfg.world):
                if r not in ready and r not in fails:
                    fails[r] = {"step": -1, "type": "init", "msg": "did not join (init)"}
            return Segment("init", stats, fails, list(progress), 0.0, thresholds)
        thresholds, _notes = merge_thresholds(cfg, ready)
        for q in inqs:
            q.put((steps, thresholds, set(faults)))
        t_run = time.monotonic()
        last = list(progress)
        last_change = time.monotonic()
        grace = None
        said = t_run

        def record(kind: str, rank: int, val: Any, st: Any) -> None:
            """One rank's report: its statistics when done, its failure (and statistics so far) when not."""
            if kind == "killed":
                killed[rank] = val
            elif kind != "done":
                fails[rank] = val
            if st is not None or kind == "done":
                stats[rank] = st

        while len(set(stats) | set(fails) | set(killed)) < cfg.world:
            try:
                kind, rank, val, st = outq.get(timeout=0.5)
                record(kind, rank, val, st)
                if kind not in ("done", "killed") and grace is None:
                    grace = time.monotonic() + 20.0  # the others get the abort and report too
                continue
            except queue.Empty:
                pass
            now = time.monotonic()
            cur = list(progress)
            if cur != last:
                last, last_change = cur, now
            if log is not None and now - said >= PROGRESS_S:
                said = now
                at = min(cur)
                done_n = sum(1 for i in steps if i < at)
                left = f", about {(now - t_run) / done_n * (len(steps) - done_n):.0f} s left" if done_n else ""
                log(f"#   {transport}: at step {at} ({done_n} of {len(steps)} steps done by every rank, "
                    f"{now - t_run:.0f} s{left})")
            dead = [r for r, pr in enumerate(procs)
                    if pr.exitcode is not None and r not in stats and r not in fails and r not in killed]
            if dead:
                time.sleep(0.5)  # its report may still be in the queue
                try:
                    while True:
                        record(*outq.get(timeout=0.2))
                except queue.Empty:
                    pass
                for r in dead:
                    if r not in stats and r not in fails and r not in killed:
                        fails[r] = {"step": progress[r], "type": "died",
                                    "msg": f"exit code {procs[r].exitcode} without a report"}
                grace = grace or now + 20.0
            if grace is not None and now > grace:
                break
            if now - last_change > hang_s:
                status = "hang"
                break
        if fails and status == "ok":
            status = "fail"
        for r in range(cfg.world):
            if r not in stats and r not in fails and r not in killed:
                fails[r] = {"step": progress[r], "type": "hung" if status == "hang" else "no report",
                            "msg": f"no progress for {hang_s:.0f} s at step {progress[r]}" if status == "hang"
                            else "killed after the others failed"}
    finally:
        loop_s = time.monotonic() - t_run if t_run is not None else 0.0
        for q in inqs:
            try:
                q.put(None)
            except Exception:  # noqa: BLE001
                pass
        for pr in procs:
            pr.join(timeout=10 if status == "ok" else 0.5)
        for pr in procs:  # only the processes this segment started
            if pr.is_alive():
                pr.kill()
                pr.join(5)
    return Segment(status, stats, fails, list(progress), loop_s, thresholds, killed)


def plan_steps(seed: int, calls: int) -> tuple[list, int]:
    """The step indices whose calls add up to at least `calls`, and that total."""
    steps, total, i = [], 0, 0
    while total < calls:
        total += step_shape(seed, i)[1]
        steps.append(i)
        i += 1
    return steps, total


def run_transport(cfg: Cfg, transport: str, steps: list, max_restarts: int, log: Any) -> dict:
    """Run the steps on one transport, restarting the world after a failure. Returns the figures."""
    t0 = time.monotonic()
    ncalls = {i: step_shape(cfg.seed, i)[1] for i in steps}
    todo = list(steps)
    completed_steps: list = []
    incidents: list = []
    wrong = 0
    wrong_details: list = []
    mix0: collections.Counter = collections.Counter()
    paths: collections.Counter = collections.Counter()
    dtypes0: collections.Counter = collections.Counter()
    groups0: collections.Counter = collections.Counter()
    sizes0: collections.Counter = collections.Counter()
    loop_s = 0.0
    call_s0 = loop_s0 = 0.0
    restarts = 0
    corrupted = 0
    thresholds: dict = {}
    while todo:
        log(f"# {transport}: {cfg.world} ranks, steps {todo[0]}..{todo[-1]} of the seeded sequence "
            f"({sum(ncalls[i] for i in todo)} calls)\n#   (a step: one collective, a send/recv pair or a batch of "
            f"async calls)")
        seg = run_segment(cfg, transport, todo, log=log)
        thresholds = seg.thresholds or thresholds
        loop_s += seg.loop_s
        for r, st in seg.stats.items():
            wrong += st.wrong
            corrupted += st.corrupted
            for dd in st.wrong_details:
                if len(wrong_details) < 10:
                    wrong_details.append(dd)
            paths.update(st.paths)
            if r == 0:
                call_s0 += st.call_s
                loop_s0 += st.loop_s
                mix0.update(st.mix)
                dtypes0.update(st.by_dtype)
                groups0.update(st.by_group)
                sizes0.update(st.sizes)
        if seg.status == "ok":
            completed_steps.extend(todo)
            break
        # where each rank stopped: steps before the lowest were finished by every rank
        pos = {r: (f["step"] if f.get("step", -1) >= 0 else seg.progress[r]) for r, f in seg.fails.items()}
        for r in range(cfg.world):
            if r not in pos:
                pos[r] = seg.progress[r]
        reached = [min(max(pos[r], -1), 1 << 40) for r in range(cfg.world)]
        lo = min(reached)
        hi = max(x for x in reached if x < (1 << 40)) if any(x < (1 << 40) for x in reached) else lo
        completed_steps.extend(i for i in todo if i < lo)
        failed_step = min((f["step"] for f in seg.fails.values() if f.get("step", -1) >= 0), default=lo)
        kinds = {f["type"] for f in seg.fails.values()}
        timeout = seg.status == "hang" or any("Timeout" in k for k in kinds)
        inc = {"kind": "hang" if seg.status == "hang" else ("timeout" if timeout else
                                                            "init" if seg.status == "init" else "error"),
               "step": failed_step, "ranks_at": reached, "lost_steps": [i for i in todo if lo <= i <= hi],
               "fails": {r: {k: v for k, v in f.items() if k != "tb"} for r, f in seg.fails.items()},
               "tracebacks": {r: f.get("tb", "") for r, f in seg.fails.items()}}
        if failed_step >= 0 and seg.thresholds:
            st_ = make_step(cfg, failed_step, seg.thresholds)
            inc["calls"] = [s.describe(cfg) for s in st_.ops]
            inc["mode"] = st_.mode
        incidents.append(inc)
        log(f"#   {inc['kind']} at step {failed_step}: " + "; ".join(
            f"rank {r}: {f['type']}: {f['msg'].splitlines()[0][:200]}" for r, f in sorted(seg.fails.items())))
        restarts += 1
        if seg.status == "init" or restarts > max_restarts:
            break
        todo = [i for i in todo if i > hi]
    done_calls = sum(ncalls[i] for i in completed_steps)
    wall = time.monotonic() - t0
    n_timeouts = sum(1 for x in incidents if x["kind"] in ("hang", "timeout"))
    return {
        "transport": transport, "ranks": cfg.world, "steps": len(steps), "calls_planned": sum(ncalls.values()),
        "calls_completed": done_calls, "steps_completed": len(completed_steps),
        "calls_per_s": done_calls / loop_s if loop_s > 0 else 0.0, "loop_s": loop_s, "wall_s": wall,
        "wrong": wrong, "wrong_details": wrong_details, "hangs": n_timeouts,
        "errors": sum(1 for x in incidents if x["kind"] in ("error", "init")),
        "incidents": incidents, "restarts": restarts, "corrupted": corrupted,
        "rank0_loop_s": loop_s0, "rank0_in_interlink_s": call_s0,
        "mix_rank0": dict(mix0.most_common()), "paths": dict(sorted(paths.items())),
        "dtypes_rank0": dict(dtypes0.most_common()), "groups_rank0": dict(groups0.most_common()),
        "sizes_rank0": dict(sizes0.most_common()),
        "thresholds": {",".join(map(str, cfg.groups[gi])): t for gi, t in thresholds.items()},
    }


def fault_chunks(cfg: Cfg, steps: list, ncalls: dict) -> list:
    """--faults: (steps, fault steps) per world: a fault each time cfg.faults more calls have been planned,
    cfg.world - 2 of them, then cfg.faults more calls and the next world."""
    chunks, cur, fl, acc = [], [], [], 0
    for i in steps:
        cur.append(i)
        acc += ncalls[i]
        if acc >= cfg.faults:
            acc = 0
            if len(fl) < max(1, cfg.world - 2):
                fl.append(i)
            else:
                chunks.append((cur, fl))
                cur, fl = [], []
    if cur:
        chunks.append((cur, fl))
    return chunks


def run_transport_faults(cfg: Cfg, transport: str, steps: list, max_restarts: int, log: Any) -> dict:
    """--faults: the steps in worlds that each lose ranks (fault_chunks); a failed world is an incident and
    the next world goes on with the next chunk. Returns run_transport's figures, plus the faults."""
    t0 = time.monotonic()
    ncalls = {i: step_shape(cfg.seed, i)[1] for i in steps}
    chunks = fault_chunks(cfg, steps, ncalls)
    fault_steps = {i for _c, fl in chunks for i in fl}
    completed: list = []
    incidents: list = []
    wrong, corrupted, restarts, killed, interrupted = 0, 0, 0, 0, 0
    wrong_details: list = []
    shrinks = 0
    paths: collections.Counter = collections.Counter()
    mix0: collections.Counter = collections.Counter()
    dtypes0: collections.Counter = collections.Counter()
    groups0: collections.Counter = collections.Counter()
    sizes0: collections.Counter = collections.Counter()
    loop_s = call_s0 = loop_s0 = 0.0
    thresholds: dict = {}
    for chunk, fl in chunks:
        log(f"# {transport}: {cfg.world} ranks, steps {chunk[0]}..{chunk[-1]} of the seeded sequence "
            f"({sum(ncalls[i] for i in chunk)} calls), a rank lost at steps {fl}\n#   (a step: one collective, "
            f"a send/recv pair or a batch of async calls)")
        seg = run_segment(cfg, transport, chunk, faults=tuple(fl), log=log)
        thresholds = seg.thresholds or thresholds
        loop_s += seg.loop_s
        killed += len(seg.killed)
        first = min(seg.stats) if seg.stats else None
        for r, st in seg.stats.items():
            if st is None:
                continue
            wrong += st.wrong
            corrupted += st.corrupted
            wrong_details.extend(st.wrong_details[:max(0, 10 - len(wrong_details))])
            paths.update(st.paths)
            if r not in seg.killed:
                shrinks += st.shrinks
                interrupted += st.interrupted
            if r == first:
                call_s0 += st.call_s
                loop_s0 += st.loop_s
                mix0.update(st.mix)
                dtypes0.update(st.by_dtype)
                groups0.update(st.by_group)
                sizes0.update(st.sizes)
        if seg.status == "ok" and len(seg.killed) == len(fl):
            completed.extend(i for i in chunk if i not in fault_steps)
            continue
        kinds = {f.get("type", "") for f in seg.fails.values()}
        timeout = seg.status == "hang" or any("Timeout" in k for k in kinds)
        failed_step = min((f["step"] for f in seg.fails.values() if f.get("step", -1) >= 0), default=chunk[0])
        inc = {"kind": "hang" if seg.status == "hang" else ("timeout" if timeout else
                                                            "init" if seg.status == "init" else "error"),
               "step": failed_step, "ranks_at": list(seg.progress), "lost_steps": chunk,
               "fails": {r: {k: v for k, v in f.items() if k != "tb"} for r, f in seg.fails.items()},
               "tracebacks": {r: f.get("tb", "") for r, f in seg.fails.items()}, "killed": seg.killed}
        if seg.status == "ok":
            inc["fails"] = {-1: {"type": "faults", "msg": f"{len(seg.killed)} ranks killed, {len(fl)} planned"}}
        incidents.append(inc)
        log(f"#   {inc['kind']} at step {failed_step}: " + "; ".join(
            f"rank {r}: {f['type']}: {f['msg'].splitlines()[0][:200]}" for r, f in sorted(inc["fails"].items())))
        restarts += 1
        if restarts > max_restarts:
            break
    planned = [i for i in steps if i not in fault_steps]
    done_calls = sum(ncalls[i] for i in completed)
    return {
        "transport": transport, "ranks": cfg.world, "steps": len(steps), "calls_planned": sum(ncalls[i] for i in planned),
        "calls_completed": done_calls, "steps_completed": len(completed),
        "calls_per_s": done_calls / loop_s if loop_s > 0 else 0.0, "loop_s": loop_s, "wall_s": time.monotonic() - t0,
        "wrong": wrong, "wrong_details": wrong_details,
        "hangs": sum(1 for x in incidents if x["kind"] in ("hang", "timeout")),
        "errors": sum(1 for x in incidents if x["kind"] in ("error", "init")),
        "incidents": incidents, "restarts": restarts, "corrupted": corrupted,
        "faults": {"planned": len(fault_steps), "killed": killed, "worlds": len(chunks),
                   "shrinks_per_survivor": shrinks, "fault_step_calls": sum(ncalls[i] for i in fault_steps),
                   "interrupted_steps_per_survivor": interrupted},
        "rank0_loop_s": loop_s0, "rank0_in_interlink_s": call_s0,
        "mix_rank0": dict(mix0.most_common()), "paths": dict(sorted(paths.items())),
        "dtypes_rank0": dict(dtypes0.most_common()), "groups_rank0": dict(groups0.most_common()),
        "sizes_rank0": dict(sizes0.most_common()),
        "thresholds": {",".join(map(str, cfg.groups[gi])): t for gi, t in thresholds.items()},
    }


def report(res: dict) -> str:
    out = [f"## {res['transport']}: {res['ranks']} ranks",
           "",
           "| calls | completed | calls/s | wrong | hangs/timeouts | errors | restarts | loop s | wall s |",
           "|---|---|---|---|---|---|---|---|---|",
           f"| {res['calls_planned']} | {res['calls_completed']} | {res['calls_per_s']:.1f} | {res['wrong']} | "
           f"{res['hangs']} | {res['errors']} | {res['restarts']} | {res['loop_s']:.1f} | {res['wall_s']:.1f} |", ""]
    if res.get("faults"):
        fa = res["faults"]
        out.append(f"faults: {fa['killed']} of {fa['planned']} planned ranks SIGKILLed mid-step in {fa['worlds']} worlds, "
                   f"{fa['shrinks_per_survivor']} shrinks (summed over survivors), {fa['fault_step_calls']} calls in "
                   f"the fault steps (not counted above; those that completed were checked), "
                   f"{fa['interrupted_steps_per_survivor']} fault steps raised PeerLostError on a survivor")
    for dd in res["wrong_details"][:5]:
        out.append(f"WRONG step {dd['step']} call {dd['call']} ({dd['mode']}) on rank {dd['rank']}: {dd['what']}")
        out.append(f"    path: {dd['path'] or '-'}")
        for pr in dd["problems"]:
            out.append(f"    {json.dumps(pr)}")
    for inc in res["incidents"]:
        out.append(f"{inc['kind'].upper()} at step {inc['step']} ({inc.get('mode', '?')}), ranks reached "
                   f"{inc['ranks_at']}, lost steps {inc['lost_steps'][:10]}")
        for c in inc.get("calls", []):
            out.append(f"    call: {c}")
        for r, f in sorted(inc["fails"].items()):
            out.append(f"    rank {r}: {f['type']}: {f['msg'][:600]}")
    if res.get("rank0_loop_s"):
        out.append(f"rank 0: {res['rank0_in_interlink_s']:.1f} s of its {res['rank0_loop_s']:.1f} s inside interlink "
                   f"calls and waits (the rest: making inputs and checking every result with numpy)")
    mix = res["mix_rank0"]
    main = [(k, v) for k, v in mix.items() if "." not in k.split(" ")[0]]
    out.append("rank-0 calls per collective: " + ", ".join(f"{k} {v}" for k, v in main))
    red = [(k, v) for k, v in mix.items() if "." in k.split(" ")[0]]
    out.append("rank-0 reductions by op: " + ", ".join(f"{k} {v}" for k, v in sorted(red)))
    out.append("rank-0 by dtype: " + ", ".join(f"{k} {v}" for k, v in res["dtypes_rank0"].items()))
    out.append("rank-0 by group: " + ", ".join(f"[{k}] {v}" for k, v in res["groups_rank0"].items()))
    out.append("rank-0 by size (elements): " + ", ".join(f"{k} {v}" for k, v in res["sizes_rank0"].items()))
    out.append("paths taken (calls, all groups): " + ", ".join(f"{k} {v}" for k, v in res["paths"].items()))
    return "\n".join(out)


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--calls", type=int, default=3000, help="calls per transport (an async batch counts each call)")
    ap.add_argument("--transport", default="shm,tcp")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--groups", default=DEFAULT_GROUPS, help="subgroups besides the world: 'a,b;c,d,e'")
    ap.add_argument("--dtypes", default=None, help="default: " + ",".join(BASE_DTYPES) + "[,bfloat16]")
    ap.add_argument("--max-elems", type=int, default=4 << 20, help="largest buffer of a call, in elements")
    ap.add_argument("--call-timeout", type=float, default=60.0)
    ap.add_argument("--max-restarts", type=int, default=3)
    ap.add_argument("--replay", default=None, help="run only these step indices (comma-separated)")
    ap.add_argument("--faults", type=int, default=0, help="SIGKILL a rank every this many calls and shrink (0: never)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--progress", type=float, default=PROGRESS_S, metavar="S",
                    help=f"seconds between two progress lines of a running world on stderr (default {PROGRESS_S:g})")
    ap.add_argument("--corrupt", type=int, nargs="?", const=0, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--fault", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--hang-after", type=float, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    W = a.ranks
    groups = [tuple(range(W))]
    for part in filter(None, (s.strip() for s in a.groups.split(";"))):
        g = tuple(int(x) for x in part.split(","))
        if all(0 <= x < W for x in g) and len(set(g)) == len(g):
            groups.append(g)
    dtypes = a.dtypes.split(",") if a.dtypes else list(BASE_DTYPES) + (["bfloat16"] if have_bfloat16() else [])
    globals()["PROGRESS_S"] = a.progress  # run_segment's pace of progress lines
    cfg = Cfg(a.seed, W, groups, dtypes, a.max_elems, a.call_timeout, a.corrupt, a.fault, a.hang_after, a.faults)
    if a.replay:
        steps = sorted({int(x) for x in a.replay.split(",")})
    else:
        steps, _ = plan_steps(a.seed, a.calls)

    def log(s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "machine": machine(),
              "command": "python benchmarks/soak.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "config": {k: v for k, v in asdict(cfg).items()}, "transports": {}}
    ok = True
    for tr in [t.strip() for t in a.transport.split(",") if t.strip()]:
        if tr not in ("shm", "tcp"):
            raise SystemExit(f"unknown transport {tr}")
        res = (run_transport_faults if cfg.faults else run_transport)(cfg, tr, steps, a.max_restarts, log)
        result["transports"][tr] = res
        print(report(res), flush=True)
        print(flush=True)
        if res["wrong"] or res["hangs"] or res["errors"] or res["calls_completed"] < res["calls_planned"]:
            ok = False
    result["ok"] = ok
    print("RESULT: " + ("OK: every call completed with the right result" if ok else "FAILED"), flush=True)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
