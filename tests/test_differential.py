"""Differential tests: every collective against numpy, on every path the runtime can take.

Property-based (hypothesis) draws the call: collective, rank count (1-5), transport, size around every
threshold of the runtime's own policy (Group.path_thresholds, read from the running ranks: a new threshold
is covered without editing this file), dtype, op, root, in place or out of place (the buffer contract's
layouts), plain arrays, slices of larger arrays (with guard elements checked), interlink.empty arenas or
torch tensors, the default algorithm or a named Schedule, synchronous or async. Each rank checks its own
result against numpy computed independently (tests/differential.py).

Profiles (tests/conftest.py): `ci` (the default: a few hundred calls, a couple of minutes on 2 cores) and
`long` to run by hand: `python3 -m pytest tests/test_differential.py --hypothesis-profile=long`
(INTERLINK_DIFF_RANKS=6,7,8: other rank counts than 1-5).
A deterministic sweep runs every collective at sizes on both sides of each threshold on 2 and 3 ranks, in
place and out of place, and checks that it really took every shared-memory path.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import differential as D  # noqa: E402
from interlink.algorithms import registry  # noqa: E402

try:
    import ml_dtypes  # noqa: F401

    HAVE_BF16 = True
except ImportError:
    HAVE_BF16 = False
try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

SCHEDULED = {"all_reduce": "all_reduce", "broadcast": "broadcast", "reduce": "reduce", "all_gather": "all_gather",
             "all_gather_list": "all_gather", "reduce_scatter": "reduce_scatter", "all_to_all": "all_to_all",
             "gather": "gather", "scatter": "scatter"}
TORCH_DTYPES = ("int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
                "complex128", "bool")
PRIMES = (2, 3, 5, 7, 13, 31, 97, 257, 1021)
CAP_BYTES = int(os.environ.get("INTERLINK_DIFF_CAP_BYTES", 10 << 20))  # the largest buffer of one rank


@pytest.fixture(scope="module")
def pool():
    p = D.Pool(keep=3)
    yield p
    p.close()


def sizes_for(thresholds: dict, coll: str, itemsize: int, p: int) -> list[int]:
    """Element counts on both sides of every threshold, for this collective's count (whole vector or one
    rank's block: the runtime's limits read the input's bytes, so both readings are covered)."""
    out = {0, 1, *PRIMES}
    per = coll in D.PER_RANK
    for t in set(thresholds.values()):
        for div in ({1, p} if per else {1}):
            base = t // (itemsize * div)
            for d in (-1, 0, 1, 17):
                out.add(max(0, base + d))
    biggest = CAP_BYTES // (itemsize * (p if per else 1))
    if coll == "all_to_all_v":
        biggest = min(biggest, 1 << 16)
    return sorted(c for c in out if c <= biggest)


@st.composite
def cases(draw, thresholds: dict, p: int):
    coll = draw(st.sampled_from(D.COLLECTIVES))
    dtypes = [d for d in D.DTYPES if d != "bfloat16" or HAVE_BF16]
    kinds = [k for k in D.KINDS if k != "torch" or HAVE_TORCH]
    kind = draw(st.sampled_from(kinds))
    if kind == "torch":
        dtypes = [d for d in dtypes if d in TORCH_DTYPES]
    if coll in D.REDUCING:
        dtypes = [d for d in dtypes if D.valid_ops(d)]
    dtype = draw(st.sampled_from(dtypes))
    op = draw(st.sampled_from(D.valid_ops(dtype))) if coll in D.REDUCING else "sum"
    itemsize = D.np_dtype(dtype).itemsize
    count = draw(st.sampled_from(sizes_for(thresholds, coll, itemsize, p)))
    algos = registry.algorithms_for(SCHEDULED[coll]) if coll in SCHEDULED else []
    algorithm = draw(st.one_of(st.none(), st.none(), st.sampled_from(algos))) if algos else None
    return D.Case(coll=coll, count=count, dtype=dtype, op=op, root=draw(st.integers(0, max(4, p - 1))),
                  inplace=coll in D.IN_PLACE and draw(st.booleans()), kind=kind, algorithm=algorithm,
                  async_op=draw(st.booleans()), seed=draw(st.integers(0, 2**31)))


# the rank counts and transports: every pair is its own world, kept across that pair's examples (one rank
# has no peer to reach, so it runs once, on the default transport). INTERLINK_DIFF_RANKS=6,7,8 runs other
# counts (a long run by hand: more ranks than cores, every rank count's own thresholds)
_RANKS = tuple(int(x) for x in os.environ.get("INTERLINK_DIFF_RANKS", "1,2,3,4,5").split(",") if x.strip())
WORLDS = [(p, t) for t in ("shm", "tcp") for p in _RANKS if p > 1 or t == "shm"]


@pytest.mark.parametrize("p,transport", WORLDS, ids=[f"{p}ranks-{t}" for p, t in WORLDS])
def test_differential(pool, p, transport):
    """Hypothesis: random calls, each checked against numpy on every rank."""
    seen: dict[str, int] = {}
    thresholds = pool.get(p, transport).thresholds

    @settings(suppress_health_check=list(HealthCheck), deadline=None)
    @given(st.data())
    def run(data):
        case = data.draw(cases(thresholds, p))
        res = pool.run(p, transport, case)
        bad = D.failures(case, res)
        assert not bad, f"{p} ranks over {transport}: {case.describe()}\n" + "\n".join(bad[:8])
        path = res[0][1]["path"].split()[0] if res[0][1]["path"] else "?"
        seen[path] = seen.get(path, 0) + 1

    run()
    print(f"{p} ranks over {transport}, paths taken:", dict(sorted(seen.items())))


# ---- the deterministic sweep: both sides of every threshold, every path ---------------------------

SWEEP = ("all_reduce", "broadcast", "all_gather", "reduce_scatter")
_DT = ("float32", "int32", "float64", "uint8", "int64", "float16")


def _sweep_cases(thresholds: dict, p: int):
    k = 0
    for coll in SWEEP:
        # (the pieces a transfer or a pushed copy is cut into are walked with a small chunk in
        # tests/test_runtime_hot.py: many pieces and a ragged last one, at a fraction of the bytes)
        # (cuda_ipc.min: device arrays only; the sweep's arrays are the host's)
        for t in sorted({v for key, v in thresholds.items()
                         if key not in ("peer_buffers.cma_piece", "peer_buffers.push_piece", "cuda_ipc.min")}):
            for d in (-1, 1):
                for inplace in (False, True):
                    dtype = _DT[k % len(_DT)]
                    k += 1
                    isz = np.dtype(dtype).itemsize
                    count = max(1, t // (isz * (p if coll in D.PER_RANK else 1)) + d)
                    op = ("sum", "max", "product", "avg", "min")[k % 5] if coll in D.REDUCING else "sum"
                    if dtype == "uint8" and op == "avg":
                        op = "sum"
                    kind = ("plain", "slice", "empty")[k % 3]
                    yield D.Case(coll=coll, count=count, dtype=dtype, op=op, root=k % p, inplace=inplace,
                                 kind=kind, seed=k)
                    if k % 4 == 0:  # the same call by the ring Schedule (the executor's in-place handling)
                        yield D.Case(coll=coll, count=count, dtype=dtype, op=op, root=k % p, inplace=inplace,
                                     kind=kind, seed=k, algorithm="ring")


@pytest.mark.parametrize("p", [2, 3])
def test_threshold_sweep(pool, p):
    """Every collective just below and just above each of the runtime's thresholds, in place and out of
    place: exact on every rank; and the sweep really went through every shared-memory path."""
    world = pool.get(p, "shm")
    paths: dict[str, int] = {}
    for case in _sweep_cases(world.thresholds, p):
        res = pool.run(p, "shm", case)
        bad = D.failures(case, res)
        assert not bad, f"{p} ranks: {case.describe()}\n" + "\n".join(bad[:8])
        path = res[0][1]["path"].split()[0]
        paths[path] = paths.get(path, 0) + 1
    taken = {x.split(":")[1] for x in paths if ":" in x}
    want = {"slots", "two_phase", "peer_buffers"}
    assert want <= taken, f"sizes reached only {sorted(paths)}"
    assert taken - {"slots", "two_phase", "peer_buffers"}, f"no Schedule was run: {sorted(paths)}"


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_in_place_layouts_every_size(pool, transport):
    """The issue's reproducer: reduce_scatter with output = input[r*n:(r+1)*n] (and all_gather's mirror) on
    3 ranks from tiny to past every shared-memory limit."""
    for n in (1, 1000, 1 << 14, 1 << 16, (1 << 18) + 3, 1 << 20):
        for coll in ("reduce_scatter", "all_gather"):
            case = D.Case(coll=coll, count=n, inplace=True, seed=n)
            bad = D.failures(case, pool.run(3, transport, case))
            assert not bad, f"{case.describe()}\n" + "\n".join(bad[:6])


# ---- the checker itself and the refused layouts ----------------------------------------------------

def test_the_checker_catches_a_wrong_element(pool):
    case = D.Case(coll="reduce_scatter", count=1000, inplace=True, corrupt=1)
    res = pool.run(2, "shm", case)
    bad = D.failures(case, res)
    assert len(bad) == 1 and bad[0].startswith("rank 1: output: 1 of 1000 wrong"), bad


@pytest.mark.parametrize("coll", ["reduce_scatter", "all_gather"])
@pytest.mark.parametrize("n", [5, 4099, 300_000, 1_100_000])
def test_a_shifted_overlap_is_refused(pool, coll, n):
    """An output that overlaps the input one element off the in-place layout: ValueError on every rank,
    before any byte moves (the next call on the same world still works), at every size (every path)."""
    case = D.Case(coll=coll, count=n, inplace=True, overlap=1)
    res = pool.run(2, "shm", case)
    for status, val in res:
        assert status == "raised" and val["type"] == "ValueError", res
        assert "overlap" in val["msg"] and "in-place layout" in val["msg"], val["msg"]
    ok = D.Case(coll=coll, count=n, inplace=True)
    assert not D.failures(ok, pool.run(2, "shm", ok))


def test_all_to_all_overlap_is_refused(pool):
    case = D.Case(coll="all_to_all", count=64, overlap=1)
    res = pool.run(2, "shm", case)
    for status, val in res:
        assert status == "raised" and val["type"] == "ValueError" and "no in-place form" in val["msg"], res
