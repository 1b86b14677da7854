"""The per-rank body of ``interlink bench``: an nccl-tests style sweep over message sizes.

Run :func:`sweep` inside every rank after ``interlink.init()`` (``python -m interlink.bench.sweep
SPEC`` does that; ``interlink bench`` starts the ranks). For each size from ``min_bytes`` to
``max_bytes``, multiplying by ``factor``:

* **Sizes** follow nccl-tests: the size is the bytes of the largest buffer. The per-rank count is
  ``size // typesize`` for all_reduce, broadcast, reduce and sendrecv, and
  ``size // typesize // nranks`` (rounded down, possibly 0) for all_gather, reduce_scatter,
  all_to_all, gather and scatter; the row's size is then recomputed from the count
  (``S = count * typesize``, times nranks for the second group), as nccl-tests prints it.
* **Out-of-place, then in-place.** Out-of-place uses separate input and output buffers. In-place
  uses one buffer, laid out as nccl-tests does: all_reduce, broadcast, reduce use the same array as
  input and output; all_gather and gather take the rank's slice of the output as input;
  reduce_scatter and scatter write into the rank's slice of the input. sendrecv and all_to_all have
  no in-place form (a concurrent send and receive on one buffer would race; the API refuses an
  all_to_all whose input and output overlap, as NCCL has none either): their in-place columns are
  None (N/A).
* **Timing.** ``warmup`` untimed calls, a barrier, then ``iters`` calls timed with
  ``time.perf_counter``; time per op = elapsed / iters on each rank. The row reports the **maximum
  over ranks** (an all_reduce MAX of float64 through interlink itself, after the timed loop), i.e.
  the time until the slowest rank finished, which is the time of the collective.
  ``algbw = S / t`` and ``busbw = algbw * busbw_factor(collective, nranks)`` (nccl-tests'
  definitions; sendrecv's factor is 1). Bandwidths are in bytes/s in the rows; the table prints GB/s.
* **Iterations.** With explicit ``iters``/``warmup`` every size uses them. In the default (auto) mode
  the timed bytes per size and mode are capped at :data:`AUTO_BYTES`:
  ``iters = clamp(AUTO_BYTES // S, 1, DEFAULT_ITERS)`` and
  ``warmup = clamp(iters // 4, 1, DEFAULT_WARMUP)`` (20/5 up to 48 MiB, 16/4 at 64 MiB, 4/1 at 256 MiB),
  and at least 35 calls from 128 KiB to 16 MiB: the host page's first 34 calls of a shape in the band around a
  limit measure its two paths (runtime.fastpath.PROBE_CALLS, policy.autotune).
* **Checking (#wrong).** With ``check`` on, after each timed loop the buffers are refilled: the
  outputs with a poison value, the inputs with deterministic small integers (exact in every dtype:
  values 0..7, or 1..2 for PRODUCT, from a fixed table indexed by rank and element), the collective
  runs once more and every element that differs from the expected result (computed with numpy from
  every rank's reconstructible input, :func:`expected_output`) is counted. The row reports the
  sum over ranks (outputs that the collective leaves unspecified, e.g. non-root ranks of reduce and
  gather, are not checked).

Each row is a dict: size, count, type, redop, root, oop_time_us, oop_algbw, oop_busbw, oop_wrong,
ip_time_us, ip_algbw, ip_busbw, ip_wrong, algorithm, nranks, transport, iters, warmup.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Optional

import numpy as np

from ..algorithms.schedule import ROOTED, buffer_sizes, busbw_factor
from ..ops import ReduceOp, check_op_dtype, finish_avg, ufunc
from .peers import aligned_empty, probe_warmup

BENCH_COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all",
                     "gather", "scatter", "sendrecv", "barrier")
# collectives whose count per rank is size / typesize / nranks (nccl-tests)
PER_RANK_SPLIT = frozenset({"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"})
REDUCING = frozenset({"all_reduce", "reduce", "reduce_scatter"})
# collectives timed out of place only (no in-place form; barrier moves no data): in-place columns N/A
NO_IN_PLACE = frozenset({"sendrecv", "all_to_all", "barrier"})

DEFAULT_ITERS = 20
DEFAULT_WARMUP = 5
AUTO_BYTES = 1024 * 1024 * 1024  # auto mode: timed bytes per size and mode (see the module docstring)

MARKER = "@@interlink-bench "  # prefix of the JSON event lines rank 0 writes on stdout

# the deterministic check data: a fixed table of small integers, indexed by (element + 131 * rank)
_TABLE_LEN = 1021
_TABLE = np.random.default_rng(20261122).integers(0, 8, size=_TABLE_LEN).astype(np.int8)
_TABLE_PROD = (_TABLE % 2 + 1).astype(np.int8)  # 1 or 2: products stay exact powers of two
_POISON = 99


# ---- configuration -----------------------------------------------------------------------------

_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32",
                  "char": "int8", "uint": "uint32", "fp16": "float16", "fp32": "float32", "fp64": "float64",
                  "bf16": "bfloat16"}


def parse_dtype(name: str) -> np.dtype:
    """numpy names plus nccl-tests' (float, half, double, int, char, bfloat16)."""
    key = _DTYPE_ALIASES.get(name.strip().lower(), name.strip().lower())
    if key == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise ValueError("dtype bfloat16 needs the ml_dtypes package (pip install ml_dtypes)") from None
        return np.dtype(ml_dtypes.bfloat16)
    try:
        dt = np.dtype(key)
    except TypeError:
        raise ValueError(f"unknown dtype {name!r}") from None
    from ..ops import numeric_dtypes

    if dt not in numeric_dtypes():
        raise ValueError(f"dtype {dt} is not supported (use one of {[str(d) for d in numeric_dtypes()]})")
    return dt


@dataclass
class BenchConfig:
    collective: str = "all_reduce"
    min_bytes: int = 8
    max_bytes: int = 64 * 1024 * 1024
    factor: int = 2
    iters: Optional[int] = None  # None: auto (see the module docstring)
    warmup: Optional[int] = None  # None: auto
    dtype: str = "float32"
    op: str = "sum"
    root: int = 0
    check: bool = True
    algorithm: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "BenchConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def validate(self, nranks: Optional[int] = None) -> None:
        """Raise ValueError/TypeError for a bad configuration (before any rank starts)."""
        if self.collective not in BENCH_COLLECTIVES:
            raise ValueError(f"unknown collective {self.collective!r}; expected one of {BENCH_COLLECTIVES}")
        if self.min_bytes < 0 or self.max_bytes < self.min_bytes:
            raise ValueError(f"need 0 <= -b ({self.min_bytes}) <= -e ({self.max_bytes})")
        if self.factor < 2 and self.max_bytes > max(self.min_bytes, 1):
            raise ValueError(f"-f must be >= 2 (got {self.factor})")
        for what, v in (("--iters", self.iters), ("-w", self.warmup)):
            if v is not None and v < (1 if what == "--iters" else 0):
                raise ValueError(f"{what} must be {'>= 1' if what == '--iters' else '>= 0'}, got {v}")
        dt = parse_dtype(self.dtype)
        if self.collective in REDUCING:
            check_op_dtype(self.op, dt)
        else:
            ReduceOp.parse(self.op)
        if nranks is not None:
            if nranks < 1:
                raise ValueError(f"--ranks must be >= 1, got {nranks}")
            if self.collective == "sendrecv" and nranks < 2:
                raise ValueError("sendrecv needs at least 2 ranks")
            if self.collective in ROOTED and not 0 <= self.root < nranks:
                raise ValueError(f"-r {self.root} is out of range for {nranks} ranks")
        if self.algorithm is not None:
            if self.collective in ("sendrecv",):
                raise ValueError("--algorithm does not apply to sendrecv (point to point)")
            from ..algorithms import registry

            have = registry.algorithms_for(self.collective)
            if registry.canonical(self.algorithm) not in have:  # a former name (fastd) too
                raise ValueError(f"unknown algorithm {self.algorithm!r} for {self.collective}; "
                                 f"registered: {sorted(have)}")


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """nccl-tests' size loop: min, min*f, ... while <= max (a 0 minimum steps to 1 byte first)."""
    out, s = [], int(min_bytes)
    while s <= max_bytes:
        out.append(s)
        if factor < 2:
            break
        s = s * factor if s > 0 else 1
    return out


def sweep_sizes(cfg: "BenchConfig", nranks: int) -> list[int]:
    """The sizes a sweep runs: nccl-tests' loop, less every size whose buffers round down to those of the
    size before it (``-b 0``'s steps 0, 1, 2 all move 0 float32 elements: one row, not three)."""
    if cfg.collective == "barrier":
        return [0]
    itemsize = parse_dtype(cfg.dtype).itemsize
    out: list[int] = []
    last = None
    for s in sizes(cfg.min_bytes, cfg.max_bytes, cfg.factor):
        count = counts_for(cfg.collective, s, itemsize, nranks)[0]
        if count != last:
            out.append(s)
            last = count
    return out


def counts_for(collective: str, size: int, itemsize: int, nranks: int) -> tuple[int, int]:
    """(count per rank, bytes S of the largest buffer) for a requested size in bytes."""
    if collective == "barrier":
        return 0, 0
    if collective in PER_RANK_SPLIT:
        count = max(size // itemsize // nranks, 0)
        return count, count * itemsize * nranks
    count = max(size // itemsize, 0)
    return count, count * itemsize


def iterations_for(nbytes: int, iters: Optional[int], warmup: Optional[int]) -> tuple[int, int]:
    """(iters, warmup) for one size: explicit values win; auto caps the bytes timed per size."""
    if iters is None:
        n = DEFAULT_ITERS if nbytes <= 0 else max(1, min(DEFAULT_ITERS, AUTO_BYTES // nbytes))
    else:
        n = int(iters)
    if warmup is None:
        w = max(1, min(DEFAULT_WARMUP, n // 4))
        w = probe_warmup(nbytes, w)  # past the host page's measuring of its two paths
    else:
        w = int(warmup)
    return n, w


def algorithm_for(collective: str, count: int, itemsize: int, nranks: int, user: Optional[str],
                  layout: Optional[tuple[int, int]] = None, nics: int = 1) -> str:
    """The algorithm a call with this count runs: --algorithm, else INTERLINK_ALGO, else the default for
    the group's ``layout`` (hosts, ranks per host; default one host) and NICs per host."""
    if collective == "sendrecv":
        return "p2p"
    if user:
        return user
    from ..model.tuner import default_algorithm, env_algorithm

    nbytes = count * itemsize * (nranks if collective in PER_RANK_SPLIT else 1)
    return env_algorithm(collective) or default_algorithm(collective, nbytes, nranks, layout, nics)


# ---- deterministic data and the reference ---------------------------------------------------------


def rank_values(rank: int, offset: int, n: int, op: ReduceOp = ReduceOp.SUM) -> np.ndarray:
    """Elements [offset, offset+n) of rank's check input, as int8 (0..7, or 1..2 for PRODUCT)."""
    tbl = _TABLE_PROD if op is ReduceOp.PRODUCT else _TABLE
    k = (int(offset) + 131 * int(rank)) % _TABLE_LEN
    if n <= 0:
        return np.empty(0, dtype=np.int8)
    return np.resize(np.roll(tbl, -k), int(n))


def _input_size(collective: str, nranks: int, count: int) -> int:
    if collective == "sendrecv":
        return count
    return buffer_sizes(collective, nranks, count)["input"]


def _output_size(collective: str, nranks: int, count: int) -> int:
    if collective == "sendrecv":
        return count
    return buffer_sizes(collective, nranks, count)["output"]


def rank_input(collective: str, rank: int, nranks: int, count: int, dtype: Any, op: Any = "sum",
               offset: int = 0, n: Optional[int] = None) -> np.ndarray:
    """The check input of ``rank`` (elements [offset, offset+n) of its input buffer) in ``dtype``;
    every rank can rebuild every other rank's input from (rank, element) alone."""
    rop = ReduceOp.parse(op) if collective in REDUCING else ReduceOp.SUM
    if n is None:
        n = _input_size(collective, nranks, count) - offset
    return rank_values(rank, offset, n, rop).astype(np.dtype(dtype))


def expected_output(collective: str, *, rank: int, nranks: int, count: int, dtype: Any, op: Any = "sum",
                    root: int = 0) -> Optional[np.ndarray]:
    """What ``rank``'s output buffer must hold after the check run (None where unspecified)."""
    dt, p = np.dtype(dtype), nranks
    rop = ReduceOp.parse(op) if collective in REDUCING else ReduceOp.SUM

    def inp(r: int, offset: int = 0, n: Optional[int] = None) -> np.ndarray:
        return rank_input(collective, r, p, count, dt, rop, offset, n)

    def reduced(offset: int, n: int) -> np.ndarray:
        acc = inp(0, offset, n).copy()
        f = ufunc(rop, dt)
        for r in range(1, p):
            f(acc, inp(r, offset, n), out=acc)
        if rop is ReduceOp.AVG:
            finish_avg(acc, p)
        return acc

    if collective == "all_reduce":
        return reduced(0, count)
    if collective == "reduce":
        return reduced(0, count) if rank == root else None
    if collective == "broadcast":
        return inp(root, 0, count)
    if collective == "reduce_scatter":
        return reduced(rank * count, count)
    if collective == "all_gather":
        return np.concatenate([inp(j, 0, count) for j in range(p)]) if p else np.empty(0, dt)
    if collective == "gather":
        return np.concatenate([inp(j, 0, count) for j in range(p)]) if rank == root else None
    if collective == "scatter":
        return inp(root, rank * count, count)
    if collective == "all_to_all":
        return np.concatenate([inp(j, rank * count, count) for j in range(p)])
    if collective == "sendrecv":
        return inp((rank - 1) % p, 0, count)
    if collective == "barrier":
        return None
    raise ValueError(f"unknown collective {collective!r}")


def count_wrong(collective: str, result: Any, *, rank: int, nranks: int, count: int, dtype: Any = None,
                op: Any = "sum", root: int = 0) -> int:
    """Elements of ``rank``'s output buffer ``result`` that differ from :func:`expected_output`
    (0 where the collective leaves the output unspecified)."""
    res = np.asarray(result).reshape(-1)
    exp = expected_output(collective, rank=rank, nranks=nranks, count=count,
                          dtype=res.dtype if dtype is None else dtype, op=op, root=root)
    if exp is None:
        return 0
    if res.size != exp.size:
        raise ValueError(f"{collective}: output has {res.size} elements, expected {exp.size}")
    return int(np.count_nonzero(res != exp))


# ---- one rank's calls ---------------------------------------------------------------------------


def _ip_views(collective: str, buf: np.ndarray, rank: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(input, output) views of the single in-place buffer, laid out as nccl-tests does."""
    if collective in ("all_gather", "gather"):
        return buf[rank * count:(rank + 1) * count], buf
    if collective in ("reduce_scatter", "scatter"):
        return buf, buf[rank * count:(rank + 1) * count]
    return buf, buf


def _make_call(g: Any, collective: str, inp: np.ndarray, out: np.ndarray, count: int, root: int,
               rop: ReduceOp, algorithm: Optional[str]) -> Callable[[], None]:
    """A no-argument callable that runs the collective once on (inp, out).

    The torch-style module API is used where it expresses the call exactly (in-place all_reduce,
    broadcast, reduce; all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, isend/irecv).
    Out of place, all_reduce and broadcast are what a torch-style user writes: copy the input into the
    output, then the in-place call (the copy is part of the time; the shared-page paths apply); reduce
    (whose non-roots' buffers the in-place call may clobber) and the flat gather/scatter (the public ones
    take lists) go through the group's executor entry point, as the public methods themselves do.
    """
    import interlink as il

    p, rank = g.size, g.rank
    kw = {"algorithm": algorithm} if algorithm else {}
    same = inp is out
    if collective == "sendrecv":
        nxt, prv = (rank + 1) % p, (rank - 1) % p

        def sendrecv() -> None:
            r = il.irecv(out, prv)
            s = il.isend(inp, nxt)
            s.wait()
            r.wait()
        return sendrecv
    if collective == "all_reduce" and same:
        return lambda: il.all_reduce(out, rop, **kw)
    if collective == "broadcast" and same:
        return lambda: il.broadcast(out, root, **kw)
    if collective == "all_reduce":
        def all_reduce_copy() -> None:
            out[...] = inp
            il.all_reduce(out, rop, **kw)
        return all_reduce_copy
    if collective == "broadcast":
        def broadcast_copy() -> None:
            if rank == root:
                out[...] = inp
            il.broadcast(out, root, **kw)
        return broadcast_copy
    if collective == "reduce" and same:
        return lambda: il.reduce(out, root, rop, **kw)
    if collective == "all_gather":
        return lambda: il.all_gather_into_tensor(out, inp, **kw)
    if collective == "reduce_scatter":
        return lambda: il.reduce_scatter_tensor(out, inp, rop, **kw)
    if collective == "all_to_all":
        return lambda: il.all_to_all_single(out, inp, **kw)
    if collective == "barrier":
        return lambda: il.barrier()
    if collective not in ("all_reduce", "broadcast", "reduce", "gather", "scatter"):
        raise ValueError(f"unknown collective {collective!r}")
    bufs = {"input": inp, "output": out}
    dt = inp.dtype

    def raw() -> None:
        g._submit(lambda: g._execute(collective, "", count, root, dt, rop, bufs, algorithm, None),
                  collective, False)
    return raw


def _fill_for_check(collective: str, inp: np.ndarray, out: np.ndarray, rank: int, nranks: int, count: int,
                    rop: ReduceOp) -> None:
    """Poison the output, then write this rank's deterministic input (order matters in place)."""
    out.fill(_POISON)
    inp[...] = rank_input(collective, rank, nranks, count, inp.dtype, rop)


def _timed(call: Callable[[], None], iters: int, warmup: int, barrier: Callable[[], None]) -> float:
    # the timed calls reduce their own results again and again (an in-place float sum doubles each call):
    # no overflow warnings from them; the values are checked on a fresh fill afterwards
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(warmup):
            call()
        barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        return (time.perf_counter() - t0) / iters


def path_taken(g: Any, collective: str) -> Optional[str]:
    """The path the group's last call took, from its flight recorder: 'slots' (one shared write per rank),
    'two_phase' (the two-phase shared-memory all_reduce), 'peer_buffers' (readers take from the writers' own buffers)
    or the Schedule's algorithm; None if unknown."""
    try:
        sig = g.recorder[-1].sig
    except (AttributeError, IndexError):
        return None
    sig = sig.decode() if isinstance(sig, bytes) else str(sig)
    return sig.split(" ", 1)[0].partition(":")[2] or None  # e.g. all_reduce:ring, all_reduce:two_phase


def transport_of(g: Any) -> str:
    """'shm', 'tcp', 'shm+tcp' (mixed) or 'self' (one rank), from this rank's channels."""
    names = sorted({getattr(ch, "name", type(ch).__name__) for ch in g.ctx.engine.channels.values()})
    return "+".join(names) if names else "self"


def run_size(g: Any, cfg: BenchConfig, size: int, transport: str = "") -> dict:
    """Benchmark one size on this rank (every rank calls it with the same arguments); the row."""
    import interlink as il

    coll, p, rank = cfg.collective, g.size, g.rank
    dt = parse_dtype(cfg.dtype)
    rop = ReduceOp.parse(cfg.op)
    if coll in REDUCING:
        rop = check_op_dtype(rop, dt)
    root = cfg.root if coll in ROOTED else 0
    count, nbytes = counts_for(coll, size, dt.itemsize, p)
    iters, warmup = iterations_for(nbytes, cfg.iters, cfg.warmup)
    barrier = lambda: il.barrier()
    factor = busbw_factor(coll, p)
    row: dict[str, Any] = {
        "size": nbytes, "count": count, "type": "-" if coll == "barrier" else str(dt),
        "redop": rop.name.lower() if coll in REDUCING else "none",
        "root": cfg.root if coll in ROOTED else -1,
        "algorithm": "dissemination" if coll == "barrier" else algorithm_for(coll, count, dt.itemsize, p, cfg.algorithm,
                                                                             g.host_layout(), g.nics()),
        "nranks": p, "transport": transport, "iters": iters, "warmup": warmup,
    }
    times: list[float] = []
    wrong: list[int] = []
    paths: dict[str, Optional[str]] = {}
    modes = ("oop",) if coll in NO_IN_PLACE else ("oop", "ip")
    for mode in modes:
        if coll == "barrier":
            inp = out = np.empty(0, dtype=np.uint8)
        elif mode == "oop":
            # page-aligned, as nccl-tests' buffers: one after the other from the heap, the output would lie
            # 16 bytes past the input modulo 4 KiB, where the out-of-place call's copy runs 2-8x slower
            # (4K aliasing; bench/peers.aligned_empty)
            inp = aligned_empty(_input_size(coll, p, count), dt)
            out = aligned_empty(_output_size(coll, p, count), dt)
        else:
            buf = aligned_empty(max(_input_size(coll, p, count), _output_size(coll, p, count)), dt)
            inp, out = _ip_views(coll, buf, rank, count)
            if coll in ("all_reduce", "broadcast", "reduce"):
                inp = out = buf
        if coll != "barrier":
            _fill_for_check(coll, inp, out, rank, p, count, rop)
        call = _make_call(g, coll, inp, out, count, root, rop, cfg.algorithm)
        times.append(_timed(call, iters, warmup, barrier))
        paths[mode] = None if coll == "sendrecv" else path_taken(g, coll)  # p2p calls are not recorded: the
        # recorder's last call is the timing's barrier
        if cfg.check and coll != "barrier":
            _fill_for_check(coll, inp, out, rank, p, count, rop)
            call()
            wrong.append(count_wrong(coll, out, rank=rank, nranks=p, count=count, dtype=dt, op=rop, root=root))
        del inp, out, call
    # what the calls really ran (the shared-page paths of an all-local group, or the Schedule's algorithm):
    # the in-place call's, as a user's torch-style call is in place; the out-of-place one's when it differs
    ip, oop = paths.get("ip"), paths.get("oop")
    if ip or oop:
        row["algorithm"] = ip or oop
        if ip and oop and ip != oop:
            row["oop_algorithm"] = oop
    # the slowest rank's time; the number of wrong elements summed over ranks
    t = np.array(times, dtype=np.float64)
    il.all_reduce(t, "max")
    if cfg.check and coll != "barrier":
        w = np.array(wrong, dtype=np.int64)
        il.all_reduce(w, "sum")
    for i, mode in enumerate(("oop", "ip")):
        if i < len(modes):
            sec = float(t[i])
            algbw = nbytes / sec if sec > 0 else 0.0
            row[f"{mode}_time_us"] = sec * 1e6
            row[f"{mode}_algbw"] = algbw
            row[f"{mode}_busbw"] = algbw * factor
            row[f"{mode}_wrong"] = int(w[i]) if cfg.check and coll != "barrier" else None
        else:
            row.update({f"{mode}_time_us": None, f"{mode}_algbw": None, f"{mode}_busbw": None, f"{mode}_wrong": None})
    return row


def sweep(cfg: BenchConfig, group: Any = None, on_row: Optional[Callable[[int, int, dict], None]] = None) -> list[dict]:
    """Run the whole sweep on this rank (call on every rank, after interlink.init()); the rows.

    ``on_row(i, total, row)`` is called after each size (on every rank; rows are the same everywhere).
    """
    import interlink as il
    from ..runtime.api import _world

    g = group if group is not None else _world()
    cfg.validate(g.size)
    transport = transport_of(g)
    # all ranks agree on the transport label (rank 0's view is reported)
    todo = sweep_sizes(cfg, g.size)
    rows = []
    il.barrier()
    for i, size in enumerate(todo):
        row = run_size(g, cfg, size, transport)
        rows.append(row)
        if on_row is not None:
            on_row(i, len(todo), row)
    return rows


# ---- python -m interlink.bench.sweep SPEC (started by `interlink bench`) ---------------------------


def _emit(event: dict) -> None:
    sys.stdout.write(MARKER + json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m interlink.bench.sweep '<json BenchConfig>' (started by `interlink bench`)",
              file=sys.stderr)
        return 2
    cfg = BenchConfig.from_dict(json.loads(argv[0]))
    try:
        _main(cfg)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - one line per rank; the whole traceback with INTERLINK_DEBUG
        if os.environ.get("INTERLINK_DEBUG"):
            import traceback

            traceback.print_exc()
        rank = os.environ.get("RANK", "?")
        msg = str(exc).strip() or repr(exc)
        print(f"interlink bench: rank {rank} failed: {type(exc).__name__}: {msg}", file=sys.stderr)
        return 1
    return 0


def _main(cfg: BenchConfig) -> None:
    import interlink as il

    g = il.init()
    try:
        lead = g.rank == 0
        if lead:
            todo = len(sweep_sizes(cfg, g.size))
            _emit({"event": "start", "nranks": g.size, "transport": transport_of(g), "sizes": todo,
                   "pid": os.getpid()})

        def on_row(i: int, total: int, row: dict) -> None:
            if lead:
                _emit({"event": "row", "index": i, "total": total, "row": row})

        sweep(cfg, g, on_row)
        if lead:
            _emit({"event": "end"})
    finally:
        il.destroy()


if __name__ == "__main__":
    sys.exit(main())
