"""The interlink backend's per-call path (no processes): CPU tensors handed to interlink as numpy views
where that is the same memory, and a completed Work that makes its torch Future only when asked.
The per-call figures: python3 benchmarks/torch_call_cost.py."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():  # pragma: no cover
    pytest.skip("torch without distributed", allow_module_level=True)

from interlink.backends.torch import _host, _op, _Work  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64, torch.uint8])
def test_a_cpu_tensor_goes_as_its_numpy_view(dtype) -> None:
    t = torch.zeros(6, dtype=dtype).view(2, 3)
    a = _host(t)
    assert type(a) is np.ndarray and a.shape == (2, 3)
    a[1, 2] = 5  # the same memory: what interlink writes lands in the tensor
    assert t[1, 2].item() == 5


def test_tensors_interlink_converts_itself_go_as_they_are() -> None:
    for t in (torch.zeros(4, dtype=torch.bfloat16), torch.zeros(4, dtype=torch.bool),
              torch.zeros(4, 4).t(),  # not contiguous
              torch.zeros(4, requires_grad=True), torch.zeros(4, dtype=torch.complex64).conj(),
              torch.nn.Parameter(torch.zeros(4), requires_grad=False)):  # a subclass
        assert _host(t) is t
    assert _host(np.zeros(2)) is not None


def test_a_completed_work() -> None:
    r = [torch.ones(2)]
    w = _Work([], r)
    assert w.is_completed() and w.is_success() and w.wait() and w.exception() is None
    f = w.get_future()
    assert f.done() and f.value() is r and w.get_future() is f

    def boom() -> None:
        raise RuntimeError("copy-out failed")

    bad = _Work([], r, after=boom)
    assert bad.is_completed() and not bad.is_success()
    with pytest.raises(RuntimeError, match="copy-out"):
        bad.wait()
    with pytest.raises(RuntimeError, match="copy-out"):
        bad.get_future().wait()


def test_reduce_ops() -> None:
    import torch.distributed as dist

    class Opts:
        pass

    o = Opts()
    assert _op(o) == ("sum", None)
    for name, op in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX), ("avg", dist.ReduceOp.AVG),
                     ("bxor", dist.ReduceOp.BXOR)):
        o.reduceOp = op
        assert _op(o) == (name, None)
