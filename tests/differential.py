"""The differential harness: real ranks run one collective call described by a `Case`, every rank checks
its result against numpy computed independently of interlink, and reports what it found.

Worlds (N spawned processes that joined one interlink job over a transport) are kept between cases, so a
property-based test can run hundreds of calls in seconds; a world whose communicator broke (an error, a
hang) is replaced. Every rank derives every rank's input from (seed, rank), so each can compute the expected
result by itself. Values are chosen so that the expected results are exact in every dtype (small integers
for sums and products), and every buffer is checked: the output, the input (unchanged unless it is the
output), and the guard elements around a slice of a larger array.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import secrets
import time
import traceback
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np

from mp import free_port

COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_list", "reduce_scatter",
               "all_to_all", "all_to_all_v", "gather", "scatter", "barrier", "sendrecv")
# collectives whose count is one rank's block
PER_RANK = frozenset({"all_gather", "all_gather_list", "reduce_scatter", "all_to_all", "all_to_all_v",
                      "gather", "scatter"})
REDUCING = frozenset({"all_reduce", "reduce", "reduce_scatter"})
# the in-place layouts of the buffer contract
# (all_gather_list / gather / scatter: the caller's tensor is its own slot of the list)
IN_PLACE = frozenset({"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_gather_list",
                      "gather", "scatter"})
DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
          "float64", "complex64", "complex128", "bfloat16", "bool")
KINDS = ("plain", "slice", "empty", "torch")
GUARD = 7  # elements on each side of a slice of a larger array


@dataclass
class Case:
    coll: str
    count: int  # elements: the whole vector, or one rank's block (PER_RANK)
    dtype: str = "float32"
    op: str = "sum"
    root: int = 0
    inplace: bool = False
    kind: str = "plain"  # how the buffers are allocated (KINDS)
    algorithm: Optional[str] = None
    async_op: bool = False
    seed: int = 0
    corrupt: int = -1  # a test of the checker: this rank flips one output element after the call
    overlap: int = 0  # a refused layout: output shifted by this many elements from the in-place one

    def describe(self) -> str:
        return " ".join(f"{k}={v}" for k, v in asdict(self).items())


def np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def valid_ops(dtype: str) -> tuple[str, ...]:
    """The ops the README promises for a dtype (not read from interlink: this is the contract)."""
    if dtype == "bool":
        return ()
    if dtype.startswith("complex"):
        return ("sum", "product", "avg")
    if dtype.startswith(("int", "uint")):
        return ("sum", "product", "min", "max", "avg", "band", "bor", "bxor")
    return ("sum", "product", "min", "max", "avg")


def values(case: Case, rank: int, size: int, salt: int = 0) -> np.ndarray:
    """Rank `rank`'s input data: small integers where a sum or product of p of them must stay exact."""
    dt = np_dtype(case.dtype)
    rng = np.random.default_rng([case.seed, rank, salt, size])
    if case.dtype == "bool":
        return rng.integers(0, 2, size).astype(bool)
    if case.op == "product":
        v = rng.choice(np.array([1, 2, -1, -2] if dt.kind not in "u" else [1, 2, 1, 3]), size)
    elif case.op in ("band", "bor", "bxor", "min", "max") and dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size, dtype=dt, endpoint=True)
    elif case.op in ("min", "max"):
        v = rng.standard_normal(size) * 100
    else:  # sum, avg, and the collectives that only move data
        v = rng.integers(-8 if dt.kind != "u" else 0, 9, size)
    if dt.kind == "c":
        w = rng.integers(-8, 9, size) if case.op != "product" else rng.choice(np.array([1, -1]), size)
        return (v + 1j * w).astype(dt)
    return np.asarray(v).astype(dt)


_UFUNC = {"sum": np.add, "avg": np.add, "product": np.multiply, "min": np.minimum, "max": np.maximum,
          "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}


def reduced(case: Case, parts: list[np.ndarray], p: int) -> np.ndarray:
    """numpy's reduction of every rank's contribution (rank order; exact for the values above)."""
    dt = np_dtype(case.dtype)
    acc = parts[0].copy()
    for x in parts[1:]:
        acc = _UFUNC[case.op](acc, x).astype(dt)
    if case.op == "avg" and p > 1:
        if dt.kind in "iu":
            wide = acc.astype(np.int64) if dt.kind == "i" else acc.astype(np.uint64)
            q = np.abs(wide) // p if dt.kind == "i" else wide // p
            acc = (np.sign(wide) * q if dt.kind == "i" else q).astype(dt)
        else:
            acc = (acc.astype(np.complex128 if dt.kind == "c" else np.float64) / p).astype(dt)
    return acc


def close(case: Case, got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Element-wise: got equals want (AVG of floats: within the dtype's rounding of one division)."""
    if case.op == "avg" and np_dtype(case.dtype).kind in "fcV":
        g = got.astype(np.complex128)
        w = want.astype(np.complex128)
        tol = 1e-2 if case.dtype in ("float16", "bfloat16") else 1e-6
        return np.abs(g - w) <= tol * np.maximum(1.0, np.abs(w))
    if np_dtype(case.dtype).kind == "f" or case.dtype == "bfloat16":
        return (got == want) | (np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64)))
    return got == want


# ---- one call on one rank ---------------------------------------------------------------------------


class Buffers:
    """Allocates flat buffers of one kind; remembers the guard regions of slices to check them later."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.dt = np_dtype(case.dtype)
        self.guards: list[tuple[np.ndarray, np.ndarray]] = []
        self.keep: list[Any] = []

    def new(self, size: int) -> np.ndarray:
        kind = self.case.kind
        if kind == "empty":
            import interlink

            return interlink.empty(size, self.dt)
        if kind == "slice":
            base = np.empty(size + 2 * GUARD, self.dt)
            g = values(Case("x", 0, self.case.dtype, seed=12345), 99, 2 * GUARD)
            base[:GUARD], base[GUARD + size:] = g[:GUARD], g[GUARD:]
            self.guards.append((base, g))
            return base[GUARD:GUARD + size]
        return np.empty(size, self.dt)

    def api(self, a: np.ndarray) -> Any:
        """What the call gets: the numpy view, or a torch tensor sharing its memory."""
        if self.case.kind == "torch":
            import torch

            return torch.from_numpy(a)
        return a

    def guard_errors(self) -> list[str]:
        bad = []
        for base, g in self.guards:
            got = np.concatenate([base[:GUARD], base[-GUARD:]])
            if not np.array_equal(got.view(np.uint8), g.view(np.uint8)):
                bad.append("a guard element next to a slice was written")
        return bad


def _fill_garbage(a: np.ndarray) -> None:
    if a.size:
        a.view(np.uint8)[...] = 0xA5


def _check(errs: list[str], what: str, case: Case, got: np.ndarray, want: np.ndarray) -> None:
    if got.shape != want.shape:
        errs.append(f"{what}: shape {got.shape} != {want.shape}")
        return
    ok = close(case, got, want)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        errs.append(f"{what}: {int((~ok).sum())} of {ok.size} wrong, first at [{i}]: got {got[i]!r}, "
                    f"want {want[i]!r}")


def _splits(case: Case, p: int) -> np.ndarray:
    """all_to_all_v: rows rank i sends to rank j, the same matrix on every rank."""
    rng = np.random.default_rng([case.seed, 7])
    return rng.integers(0, max(1, case.count) + 1, (p, p))


def _start(rank: int, n: int, p: int, shift: int) -> int:
    """Where this rank's in-place block starts, moved by shift elements (a layout the contract refuses)
    in whichever direction stays inside the buffer."""
    s = rank * n + shift
    return s if 0 <= s <= n * p - n else rank * n - shift


def run_case(dist: Any, rank: int, p: int, case: Case) -> dict:
    """Run one call on this rank and check it. Returns {'errors': [...], 'path': signature of the call}."""
    B = Buffers(case)
    c, n = case.coll, case.count
    inp_of = lambda r, size=n, salt=0: values(case, r, size, salt)  # noqa: E731
    errs: list[str] = []
    work = None
    kw: dict = {}
    if case.algorithm is not None:
        kw["algorithm"] = case.algorithm
    if case.async_op:
        kw["async_op"] = True
    root = case.root % p

    if c in ("all_reduce", "broadcast", "reduce"):
        x = B.new(n)
        mine = inp_of(rank)
        x[...] = mine
        if c == "all_reduce":
            work = dist.all_reduce(B.api(x), op=case.op, **kw)
        elif c == "broadcast":
            work = dist.broadcast(B.api(x), src=root, **kw)
        else:
            work = dist.reduce(B.api(x), dst=root, op=case.op, **kw)
        results = [("tensor", x)]
        if c == "broadcast":
            wants = [inp_of(root)]
        elif c == "reduce" and rank != root:
            wants = [mine]  # untouched
        else:
            wants = [reduced(case, [inp_of(r) for r in range(p)], p)]
        inputs = []
    elif c == "all_gather":
        if case.inplace:
            out = B.new(n * p)
            _fill_garbage(out)
            inp = out[_start(rank, n, p, case.overlap):][:n]
        else:
            out, inp = B.new(n * p), B.new(n)
            _fill_garbage(out)
        mine = inp_of(rank)
        inp[...] = mine
        work = dist.all_gather_into_tensor(B.api(out), B.api(inp), **kw)
        results = [("output", out)]
        wants = [np.concatenate([inp_of(r) for r in range(p)])]
        inputs = [] if case.inplace else [("input", inp, mine)]
    elif c == "all_gather_list":
        inp = B.new(n)
        mine = inp_of(rank)
        inp[...] = mine
        outs = [B.new(n) for _ in range(p)]
        for o in outs:
            _fill_garbage(o)
        if case.inplace:  # torch users pass their own tensor as its slot of the list
            outs[rank] = inp
        work = dist.all_gather([B.api(o) for o in outs], B.api(inp), **kw)
        results = [(f"tensor_list[{r}]", outs[r]) for r in range(p)]
        wants = [inp_of(r) for r in range(p)]
        inputs = [] if case.inplace else [("input", inp, mine)]
    elif c == "reduce_scatter":
        inp = B.new(n * p)
        mine = inp_of(rank, n * p)
        inp[...] = mine
        if case.inplace:
            out = inp[_start(rank, n, p, case.overlap):][:n]
        else:
            out = B.new(n)
            _fill_garbage(out)
        work = dist.reduce_scatter_tensor(B.api(out), B.api(inp), op=case.op, **kw)
        full = reduced(case, [inp_of(r, n * p) for r in range(p)], p)
        results = [("output", out)]
        wants = [full[rank * n:(rank + 1) * n]]
        if case.inplace:  # the rest of the input is left as it was
            inputs = [("input outside the output block", np.concatenate([inp[:rank * n], inp[(rank + 1) * n:]]),
                       np.concatenate([mine[:rank * n], mine[(rank + 1) * n:]]))]
        else:
            inputs = [("input", inp, mine)]
    elif c == "all_to_all":
        inp = B.new(n * p)
        mine = inp_of(rank, n * p)
        inp[...] = mine
        out = inp if case.overlap else B.new(n * p)
        if not case.overlap:
            _fill_garbage(out)
        work = dist.all_to_all_single(B.api(out), B.api(inp), **kw)
        results = [("output", out)]
        wants = [np.concatenate([inp_of(r, n * p)[rank * n:(rank + 1) * n] for r in range(p)])]
        inputs = [("input", inp, mine)]
    elif c == "all_to_all_v":
        S = _splits(case, p)
        isz, osz = int(S[rank].sum()), int(S[:, rank].sum())
        inp, out = B.new(isz), B.new(osz)
        mine = inp_of(rank, isz)
        inp[...] = mine
        _fill_garbage(out)
        work = dist.all_to_all_single(B.api(out), B.api(inp), output_split_sizes=[int(v) for v in S[:, rank]],
                                      input_split_sizes=[int(v) for v in S[rank]], **kw)
        blocks = []
        for r in range(p):
            src = inp_of(r, int(S[r].sum()))
            lo = int(S[r, :rank].sum())
            blocks.append(src[lo:lo + int(S[r, rank])])
        results = [("output", out)]
        wants = [np.concatenate(blocks) if blocks else np.empty(0, B.dt)]
        inputs = [("input", inp, mine)]
    elif c == "gather":
        inp = B.new(n)
        mine = inp_of(rank)
        inp[...] = mine
        outs = [B.new(n) for _ in range(p)] if rank == root else None
        for o in outs or []:
            _fill_garbage(o)
        if outs is not None and case.inplace:  # the root's own tensor as its slot of the list
            outs[root] = inp
        work = dist.gather(B.api(inp), [B.api(o) for o in outs] if outs is not None else None, dst=root, **kw)
        results = [(f"gather_list[{r}]", outs[r]) for r in range(p)] if outs else []
        wants = [inp_of(r) for r in range(p)] if outs else []
        inputs = [] if case.inplace and rank == root else [("input", inp, mine)]
    elif c == "scatter":
        out = B.new(n)
        _fill_garbage(out)
        ins = None
        if rank == root:
            ins = [B.new(n) for _ in range(p)]
            if case.inplace:  # the root's own tensor as its slot of the list
                ins[root] = out
            for r in range(p):
                ins[r][...] = inp_of(r, n, 1)
        work = dist.scatter(B.api(out), [B.api(i) for i in ins] if ins is not None else None, src=root, **kw)
        results = [("tensor", out)]
        wants = [inp_of(rank, n, 1)]
        inputs = [(f"scatter_list[{r}]", ins[r], inp_of(r, n, 1)) for r in range(p)
                  if not (case.inplace and r == root)] if ins else []
    elif c == "barrier":
        work = dist.barrier(async_op=case.async_op)
        results, wants, inputs = [], [], []
    elif c == "sendrecv":  # a ring of isend/irecv, waited in an order that depends on the rank
        results, wants, inputs = [], [], []
        if p > 1:
            nxt, prv = (rank + 1) % p, (rank - 1) % p
            s = B.new(n)
            mine = inp_of(rank)
            s[...] = mine
            r_ = B.new(n)
            _fill_garbage(r_)
            tag = case.seed % 1000
            ws = [dist.isend(B.api(s), nxt, tag=tag), dist.irecv(B.api(r_), prv, tag=tag)]
            for w in (ws if rank % 2 else ws[::-1]):
                w.wait()
            results, wants, inputs = [("received", r_)], [inp_of(prv)], [("sent", s, mine)]
    else:
        raise ValueError(f"unknown case collective {c}")
    if work is not None:
        work.wait()
    if case.corrupt == rank:
        for _, got in results:
            if got.size:
                got.view(np.uint8)[0] ^= 0x5A
                break
    for (what, got), want in zip(results, wants):
        _check(errs, what, case, got, want)
    for what, got, want in inputs:
        _check(errs, f"{what} (must be unchanged)", case, got, want)
    errs.extend(B.guard_errors())
    return {"errors": errs, "path": _last_path(dist)}


def _last_path(dist: Any) -> str:
    from interlink.runtime import api

    g = api._WORLD
    rec = g.recorder[-1] if g is not None and g.recorder else None
    return rec.sig if rec is not None else ""


# ---- worlds ------------------------------------------------------------------------------------------


def _worker(rank: int, world: int, env: dict, inq: Any, outq: Any) -> None:
    os.environ.update(env)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    try:
        import interlink as dist

        g = dist.init()
        outq.put(("ready", rank, g.path_thresholds()))
    except BaseException as e:
        outq.put(("err", rank, f"init: {type(e).__name__}: {e}"))
        return
    while True:
        case = inq.get()
        if case is None:
            break
        try:
            outq.put(("ok", rank, run_case(dist, rank, world, case)))
        except BaseException as e:  # noqa: BLE001 - every error goes back to the test
            outq.put(("raised", rank, {"type": type(e).__name__, "msg": str(e), "tb": traceback.format_exc()}))
    try:
        dist.destroy()
    except BaseException:
        pass


class WorldBroken(AssertionError):
    pass


class World:
    """n ranks of one job, waiting for cases."""

    def __init__(self, n: int, transport: str, env: Optional[dict] = None, timeout: float = 90.0) -> None:
        ctx = mp.get_context("spawn")
        self.n, self.transport = n, transport
        base = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                "INTERLINK_SECRET": secrets.token_hex(16)}
        if transport == "tcp":
            base["INTERLINK_TRANSPORT"] = "tcp"
        base.update(env or {})
        self.outq = ctx.Queue()
        self.inqs = [ctx.Queue() for _ in range(n)]
        self.procs = [ctx.Process(target=_worker, args=(r, n, base, self.inqs[r], self.outq), daemon=True)
                      for r in range(n)]
        for pr in self.procs:
            pr.start()
        got = self._collect(timeout, "init")
        self.thresholds: dict[str, int] = got[0]
        self.broken = False

    def _collect(self, timeout: float, what: str) -> list:
        res: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        while len(res) < self.n:
            try:
                status, rank, val = self.outq.get(timeout=max(0.05, min(0.5, deadline - time.monotonic())))
            except queue.Empty:
                dead = [r for r, pr in enumerate(self.procs) if pr.exitcode is not None and r not in res]
                if dead or time.monotonic() > deadline:
                    self.close()
                    raise WorldBroken(f"{what}: ranks {dead or sorted(set(range(self.n)) - set(res))} "
                                      f"{'died' if dead else 'hung (no answer in %.0f s)' % timeout}")
                continue
            if status in ("err",):
                self.close()
                raise WorldBroken(f"{what}: rank {rank}: {val}")
            res[rank] = (status, val) if what != "init" else val
        return [res[r] for r in range(self.n)]

    def run(self, case: Case, timeout: float = 120.0) -> list:
        """Every rank's (status, result) for one case; WorldBroken if a rank dies or hangs."""
        for q in self.inqs:
            q.put(case)
        return self._collect(timeout, case.describe())

    def close(self) -> None:
        for q in self.inqs:
            try:
                q.put(None)
            except Exception:
                pass
        for pr in self.procs:
            pr.join(timeout=5)
        for pr in self.procs:
            if pr.is_alive():
                pr.kill()
                pr.join(5)
        self.broken = True


class Pool:
    """Worlds by (ranks, transport, env), the most recently used few kept alive."""

    def __init__(self, keep: int = 3) -> None:
        self.worlds: "OrderedDict[tuple, World]" = OrderedDict()
        self.keep = keep

    def get(self, n: int, transport: str, env: Optional[dict] = None) -> World:
        key = (n, transport, tuple(sorted((env or {}).items())))
        w = self.worlds.get(key)
        if w is not None and not w.broken:
            self.worlds.move_to_end(key)
            return w
        while len(self.worlds) >= self.keep:
            _, old = self.worlds.popitem(last=False)
            old.close()
        w = self.worlds[key] = World(n, transport, env)
        return w

    def run(self, n: int, transport: str, case: Case, env: Optional[dict] = None) -> list:
        w = self.get(n, transport, env)
        res = w.run(case)
        if any(status == "raised" and r["type"] not in ("ValueError", "TypeError") for status, r in res):
            w.close()  # an interlink error aborts the communicator: the next case gets a new world
        return res

    def close(self) -> None:
        for w in self.worlds.values():
            w.close()
        self.worlds.clear()


def failures(case: Case, res: list) -> list[str]:
    """Every problem any rank reported for a case that must succeed."""
    out = []
    for r, (status, val) in enumerate(res):
        if status == "raised":
            out.append(f"rank {r} raised {val['type']}: {val['msg']}")
        else:
            out.extend(f"rank {r}: {e}" for e in val["errors"])
    return out
