"""Check every registered algorithm against the reference executor over a matrix of cases.

A *case* is one Schedule: (nranks, count, root, params). Each case is validated structurally,
proven symbolically (every output element holds exactly the right contributions) and run
numerically against numpy. The default matrix is sized to stay fast:

* every nranks in 1..max_ranks; counts 0, 1, p-1, p+1, 2p+3 (uneven splits) and 61 (larger);
  roots 0 and p-1 for rooted collectives; builder params at their defaults, plus local_size in
  {1, 2, 3} (where <= nranks) for builders that take one, and for the rings 2 and 3 channels and
  rail-aligned channels over hosts of 2 and 3 ranks;
* symbolic + float32 (every valid op for reducing collectives) on every case;
* the full dtype x op matrix (:func:`interlink.ops.numeric_dtypes`) on a subset: nranks in
  {1, 2, 3, 4, 5, 8} and count 2p+3, last root, default params.

``full=True`` runs the full dtype x op matrix on every case. A failing case never stops the run:
its message is collected and the next case runs.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from ..ops import ReduceOp, numeric_dtypes
from . import registry
from .schedule import has_switch_steps, one_sided, two_sided
from .reference import verify_schedule
from .schedule import ROOTED, buffer_sizes

# modules of this package that are not algorithm families
_NOT_FAMILIES = frozenset({"schedule", "registry", "reference", "verify"})

# nranks on which the default (non-full) run checks every dtype x op
MATRIX_RANKS = (1, 2, 3, 4, 5, 8)
LOCAL_SIZES = (1, 2, 3)
LARGE_COUNT = 61
# the ops the one-sided and point-to-point forms are run with numerically (symbolic proof on every case)
_FORM_OPS = (ReduceOp.SUM,)


def load_entries() -> tuple[list[registry.Entry], list[dict]]:
    """All registered entries, plus a result dict for every family module that fails to import
    (so that one broken module does not hide the others)."""
    try:
        return registry.entries(), []
    except Exception:  # noqa: BLE001 - fall back to importing family by family
        pass
    import_failures = []
    pkg = importlib.import_module(__package__)
    for mod in sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)):
        if mod in _NOT_FAMILIES:
            continue
        try:
            importlib.import_module(f"{__package__}.{mod}")
        except Exception as exc:  # noqa: BLE001
            import_failures.append({
                "collective": "*",
                "algorithm": f"<module {mod}>",
                "cases": 0,
                "failures": [f"import of {__package__}.{mod} failed: {type(exc).__name__}: {exc}"],
            })
    from .schedule import COLLECTIVES

    ents = sorted(registry._REGISTRY.values(), key=lambda e: (COLLECTIVES.index(e.collective), e.algorithm))
    return ents, import_failures


def counts_for(collective: str, nranks: int) -> list[int]:
    """The counts checked at nranks: 0, 1, p-1, p+1, 2p+3 (prime for small p) and a larger one."""
    if collective == "barrier":
        return [0]
    p = nranks
    return sorted({0, 1, max(p - 1, 0), p + 1, 2 * p + 3, LARGE_COUNT})


def roots_for(collective: str, nranks: int) -> list[int]:
    return sorted({0, nranks - 1}) if collective in ROOTED else [0]


def params_for(entry: registry.Entry, nranks: int) -> list[dict]:
    """Builder keyword arguments to try: the defaults, plus local_size in {1, 2, 3} (<= nranks), channels,
    and NVLS heads (1 and 2, alone and with hosts of 3)."""
    out: list[dict] = [{}]
    if "exits" in entry.params:
        # channels: split only (2 and 3 channels), and rail-aligned rings over hosts of 2 or 3 ranks
        # (channel c leaves every host from local rank exits[c]; reversed to exercise the mapping)
        out += [{"channels": 2}, {"channels": 3}]
        out += [{"channels": ls, "local_size": ls, "exits": tuple(range(ls))[::-1]}
                for ls in (2, 3) if ls < nranks and nranks % ls == 0]
    elif "local_size" in entry.params:
        out += [{"local_size": ls} for ls in LOCAL_SIZES if ls <= nranks]
    if "heads" in entry.params:  # NVLS heads: fewer than the block's ranks (NCCL: one per NIC, at most 32)
        out += [{"heads": h} for h in (1, 2) if h < nranks]
        if "local_size" in entry.params:
            out += [{"heads": 2, "local_size": ls} for ls in LOCAL_SIZES if 2 < ls <= nranks]
    return out


def _describe(collective: str, algorithm: str, p: int, n: int, root: int, params: dict) -> str:
    extra = "".join(f" {k}={v}" for k, v in params.items())
    return f"{collective}/{algorithm} nranks={p} count={n} root={root}{extra}"


def _check_shape(s, collective: str, algorithm: str, p: int, n: int, root: int) -> None:
    """The builder returned the Schedule it was asked for (collective, sizes, root)."""
    from ..errors import ScheduleError

    want = buffer_sizes(collective, p, n)
    got = (s.collective, s.nranks, s.count if collective != "barrier" else 0, s.root)
    exp = (collective, p, n if collective != "barrier" else 0, root)
    if got != exp:
        raise ScheduleError(f"builder returned (collective, nranks, count, root)={got}, asked for {exp}",
                            op=f"{collective}/{algorithm}")
    for name, size in want.items():
        if s.buffers.get(name) != size:
            raise ScheduleError(f"buffer {name} has {s.buffers.get(name)} elements, the contract says {size}",
                                op=f"{collective}/{algorithm}")


def iter_cases(entry: registry.Entry, max_ranks: int, full: bool = False
               ) -> Iterator[tuple[int, int, int, dict, bool]]:
    """(nranks, count, root, params, all_dtypes) for every case of one entry."""
    for p in range(1, max_ranks + 1):
        counts = counts_for(entry.collective, p)
        roots = roots_for(entry.collective, p)
        matrix_count = 2 * p + 3 if entry.collective != "barrier" else 0
        for params in params_for(entry, p):
            for n in counts:
                for root in roots:
                    all_dtypes = full or (
                        p in MATRIX_RANKS and n == matrix_count and root == roots[-1] and not params
                    )
                    yield p, n, root, params, all_dtypes


def verify_pair(collective: str, algorithm: str, max_ranks: int = 17, *, full: bool = False,
                dtypes: Sequence | None = None) -> dict:
    """Verify one registered (collective, algorithm) on every case up to max_ranks.

    Returns ``{"collective", "algorithm", "cases", "failures": [message, ...]}``; ``cases`` counts
    the Schedules checked. ``dtypes`` overrides the dtypes of the full matrix.
    """
    entry = registry.get_entry(collective, algorithm)
    return _verify_entry(entry, max_ranks, full, dtypes)


def _verify_entry(entry: registry.Entry, max_ranks: int, full: bool, dtypes: Sequence | None) -> dict:
    all_dt = tuple(dtypes) if dtypes is not None else numeric_dtypes()
    cases = 0
    failures: list[str] = []
    c, a = entry.collective, entry.algorithm
    for p, n, root, params, all_dtypes in iter_cases(entry, max_ranks, full):
        cases += 1
        try:
            s = entry.builder(p, n, root=root, **params)
            _check_shape(s, c, a, p, n, root)
            verify_schedule(s, dtypes=all_dt if all_dtypes else (np.float32,))
            # the one-sided form (every Send/Recv pair a Get of the receiver) is what the device executor
            # runs: it is verified too, symbolically and numerically on one dtype and SUM (the op is the
            # interpreter's, the same for a Get as for a Recv: every op is checked on the form above;
            # every op here too took half the run's time). one_sided/two_sided validate what they return
            verify_schedule(one_sided(s), dtypes=(np.float32,), ops=_FORM_OPS, validate=False)
            if has_switch_steps(s):  # executors without an in-switch reduction run the point-to-point lowering
                verify_schedule(two_sided(s), dtypes=(np.float32,), ops=_FORM_OPS, validate=False)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the run
            failures.append(f"{_describe(c, a, p, n, root, params)}: {type(exc).__name__}: {exc}")
    return {"collective": c, "algorithm": a, "cases": cases, "failures": failures}


def verify_all(max_ranks: int = 17, collectives: Iterable[str] | None = None,
               algorithms: Iterable[str] | None = None, full: bool = False,
               on_result: Callable[[dict], None] | None = None, jobs: int = 1) -> list[dict]:
    """Verify every registered (collective, algorithm), optionally filtered; see :func:`verify_pair`.

    ``on_result`` is called with each pair's result in registry order, as soon as it and those before it
    are known (for progress output). Family modules that fail to import are reported as results with
    collective ``"*"``. ``jobs`` > 1 verifies pairs in that many worker processes (each pair is
    independent; results and their order are the same as with one).
    """
    if max_ranks < 1:
        raise ValueError(f"max_ranks must be >= 1, got {max_ranks}")
    colls = set(collectives) if collectives else None
    algs = set(algorithms) if algorithms else None
    ents, results = load_entries()
    if colls or algs:
        results = []  # a filtered run reports only what it was asked for
    if on_result is not None:
        for r in results:
            on_result(r)
    keys = [(e.collective, e.algorithm) for e in ents
            if (colls is None or e.collective in colls) and (algs is None or e.algorithm in algs)]
    if jobs > 1 and len(keys) > 1:
        import concurrent.futures
        import multiprocessing

        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with concurrent.futures.ProcessPoolExecutor(min(jobs, len(keys)),
                                                    mp_context=multiprocessing.get_context(method)) as pool:
            futures = [pool.submit(verify_pair, c, a, max_ranks, full=full) for c, a in keys]
            for f in futures:
                res = f.result()
                results.append(res)
                if on_result is not None:
                    on_result(res)
        return results + _alltoallv_if_asked(max_ranks, colls, algs, on_result)
    for c, a in keys:
        res = verify_pair(c, a, max_ranks, full=full)
        results.append(res)
        if on_result is not None:
            on_result(res)
    return results + _alltoallv_if_asked(max_ranks, colls, algs, on_result)


def _alltoallv_if_asked(max_ranks: int, colls: set | None, algs: set | None,
                        on_result: Callable[[dict], None] | None) -> list[dict]:
    """The split-size all_to_all (not in the registry: built per rank) unless the filters leave it out."""
    if (colls is not None and ALLTOALLV[0] not in colls) or (algs is not None and ALLTOALLV[1] not in algs):
        return []
    res = verify_alltoallv(max_ranks)
    if on_result is not None:
        on_result(res)
    return [res]


# ---- all-to-all with split sizes (pairwise_v: built per rank, per call; not in the registry) --------------

#: the algorithm name the runtime gives the split-size all_to_all (algorithms/alltoallv.py)
ALLTOALLV = ("all_to_all", "pairwise_v")


def alltoallv_splits(p: int) -> list[np.ndarray]:
    """Split matrices ``m[i, j]`` (elements rank i sends rank j) checked at p ranks: all empty, all one
    element, uneven with empty pairs ((3i + 5j) mod 7), one rank sending everything it has to the last
    rank only, and a seeded random matrix of sizes 0..13."""
    ar = np.arange(p)
    out = [np.zeros((p, p), np.int64), np.ones((p, p), np.int64), (3 * ar[:, None] + 5 * ar[None, :]) % 7]
    one = np.zeros((p, p), np.int64)
    one[0, p - 1] = 11
    out.append(one)
    out.append(np.random.default_rng(p).integers(0, 14, size=(p, p)))
    return out


def alltoallv_merged(splits: np.ndarray) -> "object":
    """One Schedule holding every rank's own pairwise_v program for this split matrix (each built by
    :func:`~interlink.algorithms.alltoallv.alltoallv_schedule` as the runtime builds it, from that rank's
    sizes only), its buffers the largest rank's: what the reference interpreter runs."""
    import dataclasses

    from .alltoallv import alltoallv_schedule

    m = np.asarray(splits, dtype=np.int64)
    p = m.shape[0]
    own = [alltoallv_schedule(p, r, m[r].tolist(), m[:, r].tolist(), int(m[r].sum()), int(m[:, r].sum()))
           for r in range(p)]
    buffers = {"input": int(m.sum(axis=1).max(initial=0)), "output": int(m.sum(axis=0).max(initial=0))}
    return dataclasses.replace(own[0], buffers=buffers, ranks=tuple(own[r].ranks[r] for r in range(p)))


def check_alltoallv(splits: np.ndarray) -> None:
    """Run the merged pairwise_v Schedule (and its one-sided form) on distinct values: every rank's output
    is the blocks every rank sent it, in rank order, and nothing past its own size is written. Raises
    VerificationError."""
    from ..errors import VerificationError
    from .reference import run_numeric

    m = np.asarray(splits, dtype=np.int64)
    p = m.shape[0]
    s = alltoallv_merged(m)
    n_in, n_out = s.buffers["input"], s.buffers["output"]
    inputs = [np.full(n_in, -1.0) for _ in range(p)]
    for r in range(p):
        inputs[r][: m[r].sum()] = r * 1_000_003.0 + np.arange(m[r].sum()) + 1.0
    ioff = np.concatenate([np.zeros((p, 1), np.int64), np.cumsum(m, axis=1)], axis=1)  # ioff[i, j]
    for form, sched in (("two-sided", s), ("one-sided", one_sided(s))):
        state = run_numeric(sched, inputs, garbage=-7.0)
        for r in range(p):
            want = np.concatenate([inputs[j][ioff[j, r]: ioff[j, r] + m[j, r]] for j in range(p)] or [np.zeros(0)])
            got = state[r]["output"]
            k = int(m[:, r].sum())
            if not np.array_equal(got[:k], want) or not np.all(got[k:] == -7.0):
                bad = int(np.flatnonzero(np.r_[got[:k] != want, got[k:] != -7.0])[0])
                raise VerificationError(f"{form}: rank {r} output element {bad} is {got[bad]!r}, expected "
                                        f"{(np.r_[want, np.full(n_out - k, -7.0)])[bad]!r} (splits {m.tolist()})")


def verify_alltoallv(max_ranks: int = 17) -> dict:
    """pairwise_v on every split matrix of :func:`alltoallv_splits` at nranks 1..max_ranks; the result
    has the form of :func:`verify_pair`'s."""
    cases = 0
    failures: list[str] = []
    for p in range(1, max_ranks + 1):
        for m in alltoallv_splits(p):
            cases += 1
            try:
                check_alltoallv(m)
            except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the run
                failures.append(f"all_to_all/pairwise_v nranks={p} splits={m.tolist()}: {type(exc).__name__}: {exc}")
    return {"collective": ALLTOALLV[0], "algorithm": ALLTOALLV[1], "cases": cases, "failures": failures}
