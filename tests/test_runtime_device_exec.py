"""The device executor (runtime.device_exec: a Schedule lowered to pulls from the peers' buffers) on
host memory, without a GPU: tests/fakeipc.py stands in for CUDA IPC (peers' buffers read by cross-memory
attach), so the pull lowering, the READY/DONE rounds, the descriptor exchange and the failure paths run
in CI over real processes, on both engines (shm, tcp). The same suite runs on a real GPU in
tests/test_runtime_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

from devsuite import _dies, _mismatch, ipc_suite
from mp import run_ranks

ENV = {"INTERLINK_CUDA_IPC_MIN_BYTES": "0"}


def _cma() -> bool:
    from interlink.transport import cma

    return bool(cma.available)


@pytest.fixture(autouse=True)
def _need_cma():
    if not _cma():
        pytest.skip("cross-memory attach (process_vm_readv) is not available here")


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("nranks", [1, 2, 3, 5])
def test_device_executor_every_call(nranks: int, transport: str) -> None:
    env = dict(ENV, INTERLINK_TRANSPORT=transport)
    sizes = (0, 1, 7, 1031) if transport == "shm" else (0, 13)
    res = run_ranks(nranks, ipc_suite, "fake", sizes, env=env, timeout=600)
    for out in res:
        assert out["checks"] > 100 and out["fails"] == [], out["fails"][:5]
        assert "cuda-ipc" in out["record"], out["record"]


@pytest.mark.parametrize("order", ["host", "event"])
def test_device_executor_orders(order: str) -> None:
    res = run_ranks(3, ipc_suite, "fake", (5,), env=dict(ENV, INTERLINK_CUDA_IPC_ORDER=order), timeout=300)
    for out in res:
        assert out["fails"] == [], out["fails"][:5]


def test_device_executor_dead_rank() -> None:
    res = run_ranks(3, _dies, "fake", timeout=120, expect_dead=(2,), env=ENV)
    for r in (0, 1):
        assert res[r]["raised"] == "PeerLostError", res[r]
        assert res[r]["after"] < 10, res[r]
        assert "all_reduce" in res[r]["msg"], res[r]["msg"]


def test_device_executor_mismatch() -> None:
    res = run_ranks(2, _mismatch, "fake", "op", timeout=90, env=ENV)
    assert any(res[r]["raised"] == "CollectiveMismatchError" for r in (0, 1)), res
    assert all(res[r]["raised"] is not None and res[r]["after"] < 25 for r in (0, 1)), res


def test_plan_pulls_match_the_senders_chunks() -> None:
    """The lowering: every receive pulls exactly the chunk its sender's matching Send names."""
    from interlink.algorithms import get_schedule
    from interlink.algorithms.schedule import Recv, Send
    from interlink.ops import ReduceOp
    from interlink.runtime.device_exec import DevicePlan

    for coll, algo in (("all_reduce", "twoshot"), ("all_reduce", "ring"), ("all_gather", "ring"),
                       ("reduce_scatter", "direct"), ("broadcast", "binomial"), ("all_to_all", "pairwise")):
        for p in (2, 3, 5):
            s = get_schedule(coll, algo, p, 11)
            for r in range(p):
                plan = DevicePlan(s, r, np.dtype(np.float32), ReduceOp.SUM, None, lambda g: g, "sig")
                for k, _to, _from, pulls, _locs in plan.rounds:
                    recvs = [st for st in s.ranks[r][k].steps if isinstance(st, Recv)]
                    assert len(pulls) == len(recvs)
                    for (q, pb, plo, count, mb, mlo, _mode), rv in zip(pulls, recvs):
                        sends = [st for st in s.ranks[q][k].steps if isinstance(st, Send) and st.peer == r]
                        assert any(sd.src.offset * 4 == plo and sd.src.count == count for sd in sends)
                        assert rv.dst.offset * 4 == mlo and rv.dst.count == count


@pytest.mark.parametrize("nranks", [2, 3, 5])
def test_device_executor_every_algorithm(nranks: int) -> None:
    from devsuite import algo_suite

    res = run_ranks(nranks, algo_suite, "fake", (1, 7, 1031), env=ENV, timeout=600)
    for out in res:
        assert out["checks"] > 50 and out["fails"] == [], out["fails"][:5]
