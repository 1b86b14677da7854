"""GPU buffers over cuda-ipc on a real GPU (the device machine): several ranks on one GPU (each its own
process and CUDA context), torch CUDA tensors and CuPy arrays. Every collective the device executor runs,
every dtype and op, in place and out of place, sizes 0, 1, primes and not divisible by the ranks,
compared with numpy; the calls must really take cuda-ipc (staging is made to fail during them, and the
flight recorder names the path). Failures: a dead rank, a mismatched call, a rank on another path.
Skips cleanly without a GPU (torch with CUDA, or CuPy)."""

from __future__ import annotations


import numpy as np
import pytest

from devsuite import _dies, _large, _mismatch, _one_result, ipc_suite
from mp import RankFailure, run_ranks

pytestmark = pytest.mark.gpu


def _has_gpu(kind: str) -> bool:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return False
    except Exception:  # noqa: BLE001 - no CuPy or no driver: cuda-ipc needs CuPy
        return False
    if kind == "torch":
        try:
            import torch
        except ImportError:
            return False
        return bool(torch.cuda.is_available())
    return True


def _need(kind: str) -> None:
    if not _has_gpu(kind):
        pytest.skip(f"needs a CUDA GPU with CuPy{' and torch' if kind == 'torch' else ''}")


@pytest.mark.parametrize("kind", ["torch", "cupy"])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_cuda_ipc_every_call(nranks: int, kind: str) -> None:
    _need(kind)
    res = run_ranks(nranks, ipc_suite, kind, (0, 1, 7, 1031), timeout=600,
                    env={"INTERLINK_CUDA_IPC_MIN_BYTES": "0"})
    for out in res:
        assert out["checks"] > 100 and out["fails"] == [], out["fails"][:5]
        assert "cuda-ipc" in out["record"], out["record"]


@pytest.mark.parametrize("kind", ["torch", "cupy"])
def test_cuda_ipc_large(kind: str) -> None:
    """Larger than any cache, 3 ranks, a count not divisible by the ranks."""
    _need(kind)
    res = run_ranks(3, _large, kind, timeout=300, env={"INTERLINK_CUDA_IPC_MIN_BYTES": "0"})
    for out in res:
        assert out["fails"] == [], out["fails"]


# ---- failures ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["torch"])
def test_cuda_ipc_dead_rank(kind: str) -> None:
    _need(kind)
    res = run_ranks(3, _dies, kind, timeout=120, expect_dead=(2,), env={"INTERLINK_CUDA_IPC_MIN_BYTES": "0"})
    for r in (0, 1):
        assert res[r]["raised"] == "PeerLostError", res[r]
        assert res[r]["after"] < 10, res[r]
        assert "all_reduce" in res[r]["msg"], res[r]["msg"]


@pytest.mark.parametrize("how", ["op", "path"])
def test_cuda_ipc_mismatch(how: str) -> None:
    _need("torch")
    try:
        res = run_ranks(2, _mismatch, "torch", how, timeout=90, env={"INTERLINK_CUDA_IPC_MIN_BYTES": "0"})
    except RankFailure as e:
        raise AssertionError(str(e)) from None
    for r in (0, 1):
        assert res[r]["raised"] in ("CollectiveMismatchError", "PeerLostError", "CommTimeoutError"), res[r]
    assert any(res[r]["raised"] == "CollectiveMismatchError" for r in (0, 1)), res
    assert all(res[r]["after"] < 25 for r in (0, 1)), res


def test_staged_and_ipc_agree() -> None:
    """The staged path (INTERLINK_CUDA_IPC=0) gives the same bits as cuda-ipc."""
    _need("torch")
    a = run_ranks(3, _one_result, "torch", env={"INTERLINK_CUDA_IPC": "0"}, timeout=120)
    b = run_ranks(3, _one_result, "torch", env={"INTERLINK_CUDA_IPC_MIN_BYTES": "0"}, timeout=120)
    for r in range(3):
        assert a[r]["path"] == "staged" and b[r]["path"] == "cuda-ipc", (a[r]["path"], b[r]["path"])
        assert np.array_equal(a[r]["x"], b[r]["x"])


