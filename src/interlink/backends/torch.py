"""interlink as a torch.distributed backend: ``init_process_group(backend="interlink")``.

Registered with torch.distributed (``Backend.register_backend``) when torch loads the ``torch.backends``
entry points (torch's backend autoload, on ``import torch``), so a script that never imports interlink
still finds it; ``import interlink.backends.torch`` registers it too.

* The default process group joins interlink's world through the store torch hands the backend (no
  second port; rank 0 puts the mesh's job secret into it). Groups from ``new_group`` / DeviceMesh become
  interlink groups over their global ranks (named after torch's group name, so every member agrees).
* :class:`InterlinkProcessGroup` is a ``torch.distributed.ProcessGroup`` written in Python: each
  collective torch routes to a backend maps to the interlink call (CPU tensors over shared memory / TCP;
  CUDA tensors over cuda-ipc or staged), and returns a Work backed by a completed torch Future.
  The call itself runs before the Work is returned (interlink's own async runner is not wired in yet).
* interlink's errors (a dead peer, a mismatched call, a timeout) surface as they are: PeerLostError,
  CollectiveMismatchError, CommTimeoutError (all RuntimeErrors, as torch's are), naming op and ranks.

Not supported yet (a clear NotImplementedError): ReduceOp.PREMUL_SUM, recv from any source.
"""

from __future__ import annotations

import datetime
from typing import Any, Optional

__all__ = ["InterlinkProcessGroup", "register", "BACKEND"]

BACKEND = "interlink"
_REGISTERED = False


def _autoload() -> None:
    """torch's ``torch.backends`` entry point: register the backend, import nothing heavy."""
    try:
        register()
    except Exception:  # noqa: BLE001 - torch without distributed: nothing to register
        pass


def register() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    import torch.distributed as dist

    if BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda"])
    _REGISTERED = True


class _TorchStore:
    """torch's c10d Store with the calls interlink's rendezvous makes (set/get/wait/missing/add)."""

    def __init__(self, store: Any, timeout: float) -> None:
        self.s = store
        self.timeout = float(timeout)

    def _td(self, timeout: Optional[float]) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.timeout if timeout is None else max(float(timeout), 0.001))

    def set(self, key: str, value: Any) -> None:
        self.s.set(key, value if isinstance(value, (bytes, str)) else bytes(value))

    def get(self, key: str, timeout: Optional[float] = None) -> bytes:
        self.wait([key], timeout)
        return bytes(self.s.get(key))

    def add(self, key: str, delta: int = 1) -> int:
        return int(self.s.add(key, int(delta)))

    def missing(self, keys: Any) -> list:
        ks = [keys] if isinstance(keys, str) else list(keys)
        return [k for k in ks if not self.s.check([k])]

    def wait(self, keys: Any, timeout: Optional[float] = None) -> None:
        from ..errors import CommTimeoutError

        ks = [keys] if isinstance(keys, str) else list(keys)
        try:
            self.s.wait(ks, self._td(timeout))
        except Exception as e:  # noqa: BLE001 - torch raises DistStoreError / RuntimeError on timeout
            missing = self.missing(ks)
            if not missing:
                return
            raise CommTimeoutError(f"timed out after {timeout}s waiting for torch store key(s) {missing}: {e}") from None

    def close(self) -> None:
        pass


_WORLD_PG: Optional["InterlinkProcessGroup"] = None


def _create(opts: Any, backend_options: Any = None) -> "InterlinkProcessGroup":
    """torch's creator (extended API): the first group of a process is the world."""
    import interlink.runtime.api as api

    timeout = opts.timeout.total_seconds() if hasattr(opts.timeout, "total_seconds") else float(opts.timeout)
    ranks = list(opts.global_ranks_in_group or [])
    if api._CTX is None:
        store = _TorchStore(opts.store, min(timeout, 120.0))
        world = api.init_from_store(store, opts.group_rank, opts.group_size, timeout=timeout)
        return _named(InterlinkProcessGroup(opts.group_rank, opts.group_size, world), opts)
    ctx = api._CTX
    if not ranks:
        ranks = list(range(ctx.world_size)) if opts.group_size == ctx.world_size else []
    if len(ranks) != opts.group_size:
        raise RuntimeError(f"interlink backend: a group of size {opts.group_size} without its global ranks")
    if ranks == list(range(ctx.world_size)):
        grp = api._WORLD
    else:
        from ..runtime.group import Group

        grp = Group(ctx, ranks, f"t{getattr(opts, 'group_id', '') or len(ranks)}")
    return _named(InterlinkProcessGroup(opts.group_rank, opts.group_size, grp), opts)


def _named(pg: "InterlinkProcessGroup", opts: Any) -> "InterlinkProcessGroup":
    """torch's group name on the backend too: functional collectives (FSDP2, DTensor) find groups by it."""
    name = getattr(opts, "group_id", None)
    if name:
        pg._group_name = str(name)  # torch keeps a group's name in its C++ backends, which this one has not
    return pg


def _op(opts: Any) -> str:
    import torch.distributed as dist

    op = getattr(opts, "reduceOp", dist.ReduceOp.SUM)
    for name, want in (("sum", dist.ReduceOp.SUM), ("avg", dist.ReduceOp.AVG), ("prod", dist.ReduceOp.PRODUCT),
                       ("min", dist.ReduceOp.MIN), ("max", dist.ReduceOp.MAX), ("band", dist.ReduceOp.BAND),
                       ("bor", dist.ReduceOp.BOR), ("bxor", dist.ReduceOp.BXOR)):
        if op == want:
            return name
    raise NotImplementedError(f"interlink backend: reduce op {op} (PREMUL_SUM) is not supported yet")


def _done(result: Any) -> Any:
    from torch._C._distributed_c10d import _create_work_from_future
    from torch.futures import Future

    f: Future = Future()
    f.set_result(result)
    return _create_work_from_future(f)


def _pending(works: list, result: Any) -> Any:
    """A torch Work over interlink Works still in flight (point to point)."""
    import torch.distributed as dist

    class _Pending(dist._Work):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self._works = works

        def wait(self, timeout: Any = None) -> bool:  # noqa: ARG002 - interlink's own timeout applies
            for w in self._works:
                w.wait()
            return True

        def is_completed(self) -> bool:
            return all(w.is_completed() for w in self._works)

        def is_success(self) -> bool:
            return self.is_completed() and all(w.exception() is None for w in self._works)

        def exception(self) -> Any:
            return next((w.exception() for w in self._works if w.exception() is not None), None)

        def get_future(self) -> Any:
            from torch.futures import Future

            self.wait()
            f: Future = Future()
            f.set_result(result)
            return f

    return _Pending()


def _timeout(opts: Any) -> Optional[float]:
    t = getattr(opts, "timeout", None)
    if t is None or not hasattr(t, "total_seconds"):
        return None
    s = t.total_seconds()
    return s if s > 0 else None


try:
    import torch.distributed as _dist

    _Base: Any = _dist.ProcessGroup
except Exception:  # noqa: BLE001 - torch (or its distributed package) absent: the class is never made
    _Base = object


class InterlinkProcessGroup(_Base):  # type: ignore[misc, valid-type]
    """A torch ProcessGroup whose collectives are interlink's (``group``: an interlink Group)."""

    def __init__(self, rank: int, size: int, group: Any) -> None:
        super().__init__(rank, size)
        self.g = group
        self._group_name: Optional[str] = None

    @property
    def group_name(self) -> str:  # type: ignore[override]
        if self._group_name is None:
            raise RuntimeError("ProcessGroup name not set")
        return self._group_name

    def _set_group_name(self, name: str) -> None:  # type: ignore[override]
        self._group_name = str(name)

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND

    @property
    def name(self) -> str:  # type: ignore[override]
        return BACKEND

    # ---- reductions ---------------------------------------------------------------------------
    def allreduce(self, tensors: list, opts: Any = None) -> Any:
        op = _op(opts)
        for t in tensors:
            self.g.all_reduce(t, op, timeout=_timeout(opts))
        return _done(tensors)

    def allreduce_coalesced(self, tensors: list, opts: Any = None) -> Any:
        return self.allreduce(tensors, opts)

    def reduce(self, tensors: list, opts: Any = None) -> Any:
        for t in tensors:
            self.g.reduce(t, int(opts.rootRank), _op(opts), timeout=_timeout(opts))
        return _done(tensors)

    def reduce_scatter(self, outputs: list, input_lists: list, opts: Any = None) -> Any:
        import torch

        op = _op(opts)
        for out, ins in zip(outputs, input_lists):
            self.g.reduce_scatter_tensor(out, torch.cat([t.reshape(-1) for t in ins]), op, timeout=_timeout(opts))
        return _done(outputs)

    def reduce_scatter_single(self, output: Any, input: Any, opts: Any = None) -> Any:
        self.g.reduce_scatter_tensor(output, input, _op(opts), timeout=_timeout(opts))
        return _done([output])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        op = _op(opts)
        for o, i in zip(outputs, inputs):
            self.g.reduce_scatter_tensor(o, i, op, timeout=_timeout(opts))
        return _done(outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # ---- moves --------------------------------------------------------------------------------
    def broadcast(self, tensors: list, opts: Any = None) -> Any:
        for t in tensors:
            self.g.broadcast(t, int(opts.rootRank), timeout=_timeout(opts))
        return _done(tensors)

    def allgather(self, output_lists: list, inputs: list, opts: Any = None) -> Any:
        for outs, t in zip(output_lists, inputs):
            self.g.all_gather(outs, t, timeout=_timeout(opts))
        return _done(output_lists)

    allgather_coalesced = allgather

    def all_gather_single(self, output: Any, input: Any, opts: Any = None) -> Any:
        self.g.all_gather_into_tensor(output, input, timeout=_timeout(opts))
        return _done([output])

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        for o, i in zip(outputs, inputs):
            self.g.all_gather_into_tensor(o, i, timeout=_timeout(opts))
        return _done(outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def gather(self, output_lists: list, inputs: list, opts: Any = None) -> Any:
        root = int(opts.rootRank)
        for i, t in enumerate(inputs):
            self.g.gather(t, output_lists[i] if self.g.rank == root else None, root, timeout=_timeout(opts))
        return _done(output_lists)

    def scatter(self, outputs: list, input_lists: list, opts: Any = None) -> Any:
        root = int(opts.rootRank)
        for i, t in enumerate(outputs):
            self.g.scatter(t, input_lists[i] if self.g.rank == root else None, root, timeout=_timeout(opts))
        return _done(outputs)

    def all_to_all_single(self, output: Any, input: Any, output_split_sizes: list, input_split_sizes: list,
                          opts: Any = None) -> Any:
        self.g.all_to_all_single(output, input, list(output_split_sizes) or None, list(input_split_sizes) or None,
                                 timeout=_timeout(opts))
        return _done([output])

    alltoall_base = all_to_all_single

    def alltoall(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        import torch

        splits_in = [t.numel() for t in inputs]
        splits_out = [t.numel() for t in outputs]
        inp = torch.cat([t.reshape(-1) for t in inputs])
        out = torch.empty(sum(splits_out), dtype=inp.dtype, device=inp.device)
        self.g.all_to_all_single(out, inp, splits_out, splits_in, timeout=_timeout(opts))
        off = 0
        for t, n in zip(outputs, splits_out):
            t.copy_(out[off:off + n].reshape(t.shape))
            off += n
        return _done(outputs)

    def barrier(self, opts: Any = None) -> Any:
        self.g.barrier(timeout=_timeout(opts))
        return _done([])

    # ---- point to point -----------------------------------------------------------------------
    # (asynchronous: a send may wait for its receiver -- one copy, read in place -- so isend must return
    # before the peer posts its irecv, as batch_isend_irecv and ring exchanges need)
    def send(self, tensors: list, dst: int, tag: int = 0) -> Any:
        return _pending([self.g.isend(t, int(dst), int(tag)) for t in tensors], tensors)

    def recv(self, tensors: list, src: int, tag: int = 0) -> Any:
        return _pending([self.g.irecv(t, int(src), int(tag)) for t in tensors], tensors)

    def recv_anysource(self, tensors: list, tag: int = 0) -> Any:
        raise NotImplementedError("interlink backend: recv without a source (any-source) is not supported yet; "
                                  "pass src=")
