"""interlink as a torch.distributed backend: ``init_process_group(backend="interlink")``.

Registered with torch.distributed (``Backend.register_backend``) when torch loads the ``torch.backends``
entry points (torch's backend autoload, on ``import torch``), so a script that never imports interlink
still finds it; ``import interlink.backends.torch`` registers it too.

* The default process group joins interlink's world through the store torch hands the backend (no
  second port; rank 0 puts the mesh's job secret into it). Groups from ``new_group`` / DeviceMesh become
  interlink groups over their global ranks (named after torch's group name, so every member agrees).
* :class:`InterlinkProcessGroup` is a ``torch.distributed.ProcessGroup`` written in Python: each
  collective torch routes to a backend maps to the interlink call (CPU tensors over shared memory / TCP;
  CUDA tensors over cuda-ipc or staged). A call torch marks async (``asyncOp``: DDP's buckets, FSDP's
  prefetch, ``async_op=True``) goes to interlink's runner and returns at once; its Work's torch Future
  completes on the runner thread as soon as the call is done, so communication overlaps with compute.
* interlink's errors (a dead peer, a mismatched call, a timeout) surface as they are: PeerLostError,
  CollectiveMismatchError, CommTimeoutError (all RuntimeErrors, as torch's are), naming op and ranks.

ReduceOp.PREMUL_SUM (FSDP's gradient pre-division) is a SUM of inputs pre-multiplied by the factor. A
recv without ``src`` takes the first matching message from any rank (Group.irecv_any).
"""

from __future__ import annotations

import datetime
import os
import threading
from typing import Any, Optional

__all__ = ["InterlinkProcessGroup", "register", "BACKEND", "lost_ranks"]

BACKEND = "interlink"
_REGISTERED = False

#: The oldest torch the backend runs on. Before 2.7 a Work that a Python ProcessGroup returns to a C++ caller
#: (DDP's parameter check and reducer, functional collectives) loses its Python half on the way, and the
#: caller's wait never ends (2.5 and 2.6 hang in DDP's constructor); torch 2.7 keeps it alive (PyWorkHolder,
#: pytorch/pytorch#146376).
MIN_TORCH = (2, 7)


def torch_version_problem(version: str) -> Optional[str]:
    """Why this torch cannot run the backend (a message naming the version it needs), or None."""
    import re

    m = re.match(r"(\d+)\.(\d+)", str(version))
    if m is None or (int(m.group(1)), int(m.group(2))) >= MIN_TORCH:
        return None
    need = ".".join(map(str, MIN_TORCH))
    return (f"interlink backend: needs torch {need} or later, this is torch {version} (before {need}, C++ callers "
            f"such as DDP wait forever on a Python process group's Works: pytorch/pytorch#146376); "
            f"pip install 'torch>={need}'")


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
    _adapt_shrink_group()
    _REGISTERED = True


def _adapt_shrink_group() -> None:
    """Let ``torch.distributed.shrink_group`` take interlink's groups. torch 2.13's shrink_group expects a C++
    backend inside a C++ ProcessGroup: it asks the group for its device backend (this backend is the group
    itself, a Python ProcessGroup, as torch's extended API makes it) and wraps the backend that ``shrink``
    returns in a new C++ ProcessGroup (which takes no Python backend). For interlink's groups these two
    steps take the group itself and the returned group itself (named and described as torch names them);
    every other backend goes through torch's own steps unchanged."""
    from torch.distributed import distributed_c10d as c10d

    if getattr(c10d, "_interlink_shrink", False) or not hasattr(c10d, "_create_shrunk_process_group") \
            or not hasattr(c10d, "_validate_shrink_backend_requirements"):
        return
    validate, create = c10d._validate_shrink_backend_requirements, c10d._create_shrunk_process_group

    def _validate(group_info: dict) -> Any:
        pg = group_info.get("process_group")
        return pg if isinstance(pg, InterlinkProcessGroup) else validate(group_info)

    def _create_shrunk(new_backend: Any, remaining_ranks: list, metadata: dict, is_default_group: bool) -> Any:
        if not isinstance(new_backend, InterlinkProcessGroup):
            return create(new_backend, remaining_ranks, metadata, is_default_group)
        pg = new_backend
        pg._set_group_name(metadata["new_group_name"])
        try:
            pg._set_group_desc("default:shrunken" if is_default_group else f"{metadata['original_group_name']}:shrunk")
        except Exception:  # noqa: BLE001 - a description only
            pass
        if metadata.get("bound_device_id") is not None:
            pg.bound_device_id = metadata["bound_device_id"]
        if metadata.get("backend_config") is not None:
            c10d._world.pg_backend_config[pg] = metadata["backend_config"]
        return pg

    c10d._validate_shrink_backend_requirements = _validate
    c10d._create_shrunk_process_group = _create_shrunk
    c10d._interlink_shrink = True


def lost_ranks(group: Any = None, timeout: Optional[float] = None) -> list:
    """The ranks of torch group ``group`` (default: the default group) that its survivors agree are lost;
    every survivor calls it after a failure (interlink's PeerLostError, as torch raises it) and passes the
    result to ``torch.distributed.shrink_group``, which needs the same list on every survivor."""
    import torch
    import torch.distributed as dist

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, InterlinkProcessGroup):
        try:
            pg = pg._get_backend(torch.device("cpu"))
        except RuntimeError:
            pass
    if not isinstance(pg, InterlinkProcessGroup):
        raise TypeError(f"lost_ranks: {type(pg).__name__} is not a group of interlink's backend")
    return pg.g.lost_ranks(timeout)


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
    import torch

    import interlink.runtime.api as api

    problem = torch_version_problem(torch.__version__)
    if problem is not None:
        raise RuntimeError(problem)

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


_OPS: list = []  # (interlink's name, torch's ReduceOp), SUM first: filled at the first call


def _op(opts: Any) -> tuple[str, Any]:
    """The interlink op of torch's ReduceOp, and PREMUL_SUM's factor (a number or a one-element tensor;
    None for the other ops): PREMUL_SUM is a SUM of the inputs each multiplied by the factor first."""
    import torch.distributed as dist

    if not _OPS:
        _OPS.extend((("sum", dist.ReduceOp.SUM), ("avg", dist.ReduceOp.AVG), ("prod", dist.ReduceOp.PRODUCT),
                     ("min", dist.ReduceOp.MIN), ("max", dist.ReduceOp.MAX), ("band", dist.ReduceOp.BAND),
                     ("bor", dist.ReduceOp.BOR), ("bxor", dist.ReduceOp.BXOR)))
    op = getattr(opts, "reduceOp", None)
    if op is None:
        return "sum", None
    for name, want in _OPS:
        if op == want:
            return name, None
    if getattr(op, "op", None) == dist.ReduceOp.PREMUL_SUM:
        if not hasattr(op, "factor"):  # torch before 2.13 keeps the factor in C++ only
            import torch

            raise NotImplementedError(f"interlink backend: PREMUL_SUM needs torch 2.13 or later, whose ReduceOp "
                                      f"shows its factor to Python (this is torch {torch.__version__})")
        factor = op.factor
        if factor is None:
            raise ValueError("interlink backend: PREMUL_SUM without a factor")
        return "sum", factor
    raise ValueError(f"interlink backend: unknown reduce op {op}")


def _scaled(t: Any, factor: Any) -> Any:
    """t * factor as a new tensor of t's dtype (PREMUL_SUM's pre-multiplication; t is not written)."""
    if factor is None:
        return t
    if not t.is_floating_point() and not t.is_complex():
        raise TypeError(f"interlink backend: PREMUL_SUM needs a floating-point tensor, got {t.dtype}")
    return t.mul(factor.to(t.device) if hasattr(factor, "to") else factor).to(t.dtype)


def _dense(tensors: list) -> tuple[list, Any]:
    """Contiguous stand-ins for non-contiguous tensors (gloo accepts those): the tensors to hand interlink,
    and a function that copies the results back (None when every tensor is contiguous already)."""
    if all(t.is_contiguous() for t in tensors):
        return tensors, None
    dense = [t if t.is_contiguous() else t.contiguous() for t in tensors]

    def back() -> None:
        for t, d in zip(tensors, dense):
            if d is not t:
                t.copy_(d)

    return dense, back


def _async(opts: Any) -> bool:
    """Whether the caller may overlap this call: torch sets ``asyncOp`` from ``async_op`` (False: it waits
    at once, so the call runs inline, no thread hop); C++ callers (DDP's reducer, functional
    collectives) leave it True."""
    return bool(getattr(opts, "asyncOp", True)) if opts is not None else True


def _async_mode(value: Optional[str]) -> Optional[bool]:
    """INTERLINK_TORCH_ASYNC: "1" every call the caller lets overlap goes to interlink's runner, "0" every
    call runs inline, unset or "auto" (None): as "1", except CPU tensors on a host with fewer than two
    cores per local rank run inline (see :func:`cores_scarce`)."""
    v = (value or "auto").strip().lower()
    if v in ("auto", ""):
        return None
    if v in ("0", "1"):
        return v == "1"
    raise ValueError(f"INTERLINK_TORCH_ASYNC must be 0, 1 or auto, not {value!r}")


def cores_scarce(ncpu: int, nlocal: int) -> bool:
    """Whether this host has no core to spare for each local rank's progress: fewer than two cores a
    local rank. An overlapped CPU collective then runs on the core the training's own compute needs (the
    runner thread and the backward pass take turns, and every thread hop costs a wake-up): inline is
    faster there. DDP, 21M parameters, batch 1, 2 cores: gloo / interlink 1.33-1.56x with async Works,
    1.45-1.87x inline at 2 ranks; 1.42-1.55x and 1.45-1.61x at 4 (benchmarks/RESULTS.md)."""
    return ncpu < 2 * nlocal


def _on_cpu(result: Any) -> bool:
    """Whether a call's tensors (a tensor, or lists of them, as torch hands them) are CPU tensors."""
    t = result
    while isinstance(t, (list, tuple)):
        if not t:
            return True
        t = t[0]
    dev = getattr(t, "device", None)
    return getattr(dev, "type", "cpu") == "cpu"


#: "env": each process group reads INTERLINK_TORCH_ASYNC when it is created; True / False / None (auto)
#: force a mode on every group of the process (benchmarks/torch_ddp.py compares them in one run)
_ASYNC: Any = "env"


def _timeout(opts: Any) -> Optional[float]:
    t = getattr(opts, "timeout", None)
    if t is None or not hasattr(t, "total_seconds"):
        return None
    s = t.total_seconds()
    return s if s > 0 else None


try:
    import torch as _torch
    import torch.distributed as _dist
    from torch.futures import Future as _Future

    _Base: Any = _dist.ProcessGroup
    _WorkBase: Any = _dist._Work  # type: ignore[attr-defined]
    _Tensor: Any = _torch.Tensor
    #: dtypes a CPU tensor hands interlink as a numpy view (:func:`_host`); the others (bfloat16, bool,
    #: complex, ...) go as tensors, which interlink converts itself
    _NP_DTYPES = frozenset((_torch.float32, _torch.float64, _torch.float16, _torch.int8, _torch.uint8,
                            _torch.int16, _torch.int32, _torch.int64))
except Exception:  # noqa: BLE001 - torch (or its distributed package) absent: the classes are never made
    _Base = _WorkBase = _Tensor = object
    _NP_DTYPES = frozenset()


def _host(t: Any) -> Any:
    """A contiguous CPU tensor of a numpy dtype, not requiring grad, as the numpy view of its memory
    (``Tensor.numpy()``: the same bytes, written in place), so that interlink's group takes it as it takes
    numpy arrays: a synchronous call that fits the host page runs its latency path (a cached plan per
    shape) instead of validating and converting the tensor on every call (benchmarks/torch_call_cost.py).
    Any other tensor is returned as it is (interlink converts or stages it, and raises on what it refuses)."""
    if type(t) is _Tensor and t.is_cpu and not t.requires_grad and t.dtype in _NP_DTYPES and t.is_contiguous():
        try:
            return t.numpy()
        except (RuntimeError, TypeError):  # a conjugate or negative view: interlink's own conversion
            return t
    return t


class _Work(_WorkBase):  # type: ignore[misc, valid-type]
    """A torch Work over interlink Works in flight: its torch Future completes on interlink's runner thread
    the moment the last of them is done (after ``after``, the copy-out of list forms), so DDP's and
    FSDP's ``then`` callbacks run there, in call order; ``wait`` raises interlink's own error (the op,
    the group, the sequence number and the ranks), as a torch Work's wait does. ``keep``: temporaries the
    calls read, alive until they are done."""

    def __init__(self, works: list, result: Any, after: Any = None, keep: Any = (), source: Any = -1) -> None:
        super().__init__()
        self._works = [w for w in works if w is not None] if works else []
        self._result = result
        self._source = source
        self._exc: Optional[BaseException] = None
        self._fut: Any = None  # a completed Work's future: made when asked for (get_future)
        if not self._works:  # done already (the inline calls): no lock, no callbacks
            self._after, self._keep = None, ()
            if after is not None:
                try:
                    after()
                except BaseException as e:  # noqa: BLE001 - delivered to wait() and the future
                    self._exc = e
            return
        self._after = after
        self._keep = keep
        self._fut = _Future()
        self._left = len(self._works)
        self._lock = threading.Lock()
        for w in list(self._works):
            w.add_done_callback(self._one_done)

    def _one_done(self, w: Any) -> None:
        with self._lock:
            if w.exception() is not None and self._exc is None:
                self._exc = w.exception()
            self._left -= 1
            last = self._left == 0
        if last:
            self._complete()

    def _complete(self) -> None:
        if self._exc is None and self._after is not None:
            try:
                self._after()
            except BaseException as e:  # noqa: BLE001 - delivered to wait() and the future
                self._exc = e
        self._after, self._keep = None, ()
        if self._exc is not None:
            self._fut.set_exception(self._exc)
        else:
            self._fut.set_result(self._result)

    def _future(self) -> Any:
        """The torch Future (a completed Work's made now, completed as the Work is)."""
        fut = self._fut
        if fut is None:
            fut = self._fut = _Future()
            if self._exc is not None:
                fut.set_exception(self._exc)
            else:
                fut.set_result(self._result)
        return fut

    def wait(self, timeout: Any = None) -> bool:  # noqa: ARG002 - interlink's own timeout applies
        if self._works:
            for w in self._works:
                w.wait()
            self._fut.wait()  # the copy-out and the future, completed on the runner thread just after
        if self._exc is not None:
            raise self._exc
        return True

    def is_completed(self) -> bool:
        return not self._works or self._fut.done()

    def is_success(self) -> bool:
        return self.is_completed() and self._exc is None

    def exception(self) -> Any:
        return self._exc

    def result(self) -> Any:
        self.wait()
        return self._result

    def get_future(self) -> Any:
        return self._future()

    def synchronize(self) -> None:
        pass

    def source_rank(self) -> int:
        """The sender's group rank (a receive; from any source: known once it is done)."""
        if isinstance(self._source, int):
            return self._source
        self.wait()
        return int(self._source.result())

    _source_rank = source_rank


class InterlinkProcessGroup(_Base):  # type: ignore[misc, valid-type]
    """A torch ProcessGroup whose collectives are interlink's (``group``: an interlink Group).

    A call with ``asyncOp`` False (``async_op=False`` in torch's API) runs inline and returns a completed
    Work; otherwise it goes to interlink's runner (one per process, in call order) and returns at once,
    so DDP's backward and FSDP's prefetch overlap with communication."""

    def __init__(self, rank: int, size: int, group: Any) -> None:
        super().__init__(rank, size)
        self.g = group
        self._group_name: Optional[str] = None
        eng = getattr(getattr(group, "ctx", None), "engine", None)
        # INTERLINK_TORCH_ASYNC unset: CPU tensors run inline where the host has no core to spare a rank
        self._scarce = eng is not None and cores_scarce(eng.ncpu, eng.nlocal)
        self._mode = _async_mode(os.environ.get("INTERLINK_TORCH_ASYNC"))

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

    def _go(self, opts: Any, result: Any, calls: list, after: Any = None, keep: Any = ()) -> _Work:
        """Issue ``calls`` (each: ``async_op -> interlink Work or None``) in order; inline when the caller
        waits at once, else on the runner."""
        mode = self._mode if isinstance(_ASYNC, str) else _ASYNC
        if mode is False or not _async(opts) or (mode is None and self._scarce and _on_cpu(result)):
            for c in calls:
                c(False)
            if after is not None:
                after()
            return _Work([], result)
        return _Work([c(True) for c in calls], result, after, keep)

    # ---- reductions ---------------------------------------------------------------------------
    def allreduce(self, tensors: list, opts: Any = None) -> Any:
        op, factor = _op(opts)
        to = _timeout(opts)
        if factor is not None:
            for t in tensors:  # the output overwrites it: pre-multiply in place
                t.copy_(_scaled(t, factor))
        dense, back = _dense(tensors)
        return self._go(opts, tensors, [lambda a, t=t: self.g.all_reduce(_host(t), op, a, timeout=to) for t in dense],
                        back, dense)

    def allreduce_coalesced(self, tensors: list, opts: Any = None) -> Any:
        """One all_reduce of the tensors packed together (as gloo does), unpacked when it is done."""
        import torch

        if len(tensors) < 2 or len({(t.dtype, t.device) for t in tensors}) > 1:
            return self.allreduce(tensors, opts)
        op, factor = _op(opts)
        flat = torch.cat([t.reshape(-1) for t in tensors])
        if factor is not None:
            flat = _scaled(flat, factor)

        def unpack() -> None:
            off = 0
            for t in tensors:
                n = t.numel()
                t.copy_(flat[off:off + n].view(t.shape))
                off += n

        return self._go(opts, tensors, [lambda a: self.g.all_reduce(flat, op, a, timeout=_timeout(opts))],
                        unpack, (flat,))

    def reduce(self, tensors: list, opts: Any = None) -> Any:
        op, factor = _op(opts)
        root = int(opts.rootRank)
        # the root's tensor is overwritten: pre-multiplied in place; the others reduce a scaled copy
        srcs = [t if factor is None else (t.copy_(_scaled(t, factor)) if self.g.rank == root else _scaled(t, factor))
                for t in tensors]
        return self._go(opts, tensors, [lambda a, t=t: self.g.reduce(t, root, op, a, timeout=_timeout(opts))
                                        for t in srcs], keep=srcs)

    def reduce_scatter(self, outputs: list, input_lists: list, opts: Any = None) -> Any:
        import torch

        op, factor = _op(opts)
        if any(len({t.numel() for t in ins}) > 1 for ins in input_lists):
            return self._reduce_scatter_uneven(outputs, input_lists, op, factor, opts)
        flats = [_scaled(torch.cat([t.reshape(-1) for t in ins]), factor) for ins in input_lists]
        return self._go(opts, outputs, [lambda a, o=o, i=i: self.g.reduce_scatter_tensor(o, i, op, a,
                                                                                          timeout=_timeout(opts))
                                        for o, i in zip(outputs, flats)], keep=flats)

    def _reduce_scatter_uneven(self, outputs: list, input_lists: list, op: str, factor: Any, opts: Any) -> Any:
        """torch's list form with blocks of different sizes (rank k's output has input_list[k]'s size), as
        gloo takes it: each block padded to the largest, one reduce_scatter of the padded blocks, each rank
        keeps its block's first elements (a padded element is reduced with padding only, never read)."""
        import torch

        me, pads, outs = self.g.rank, [], []
        for o, ins in zip(outputs, input_lists):
            if len(ins) != self.g.size:
                raise ValueError(f"interlink backend: reduce_scatter takes {self.g.size} inputs, got {len(ins)}")
            if o.numel() != ins[me].numel():
                raise ValueError(f"interlink backend: reduce_scatter: rank {me}'s output has {o.numel()} elements, "
                                 f"its input block {ins[me].numel()}")
            m = max(t.numel() for t in ins)
            pad = torch.zeros(m * len(ins), dtype=o.dtype, device=o.device)
            for k, t in enumerate(ins):
                pad[k * m:k * m + t.numel()] = t.reshape(-1)
            pads.append(_scaled(pad, factor))
            outs.append(torch.empty(m, dtype=o.dtype, device=o.device))

        def unpack() -> None:
            for o, b in zip(outputs, outs):
                o.copy_(b[:o.numel()].view(o.shape))

        return self._go(opts, outputs, [lambda a, o=o, i=i: self.g.reduce_scatter_tensor(o, i, op, a,
                                                                                          timeout=_timeout(opts))
                                        for o, i in zip(outs, pads)], unpack, (pads, outs))

    def reduce_scatter_single(self, output: Any, input: Any, opts: Any = None) -> Any:
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        op, factor = _op(opts)
        ins = [_scaled(i, factor) for i in inputs]
        to = _timeout(opts)
        return self._go(opts, outputs, [lambda a, o=o, i=i: self.g.reduce_scatter_tensor(_host(o), _host(i), op, a,
                                                                                          timeout=to)
                                        for o, i in zip(outputs, ins)], keep=ins)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # ---- moves --------------------------------------------------------------------------------
    def broadcast(self, tensors: list, opts: Any = None) -> Any:
        root = int(opts.rootRank)
        dense, back = _dense(tensors)
        to = _timeout(opts)
        return self._go(opts, tensors, [lambda a, t=t: self.g.broadcast(_host(t), root, a, timeout=to)
                                        for t in dense], back, dense)

    def allgather(self, output_lists: list, inputs: list, opts: Any = None) -> Any:
        dense = [_dense(o) for o in output_lists]
        backs = [b for _, b in dense if b is not None]
        ins = [t.contiguous() for t in inputs]
        return self._go(opts, output_lists, [lambda a, o=o[0], t=t: self.g.all_gather(o, t, a, timeout=_timeout(opts))
                                             for o, t in zip(dense, ins)],
                        (lambda: [b() for b in backs]) if backs else None, (dense, ins))

    allgather_coalesced = allgather

    def all_gather_single(self, output: Any, input: Any, opts: Any = None) -> Any:
        return self.all_gather_single_coalesced([output], [input], opts)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        to = _timeout(opts)
        return self._go(opts, outputs, [lambda a, o=o, i=i: self.g.all_gather_into_tensor(_host(o), _host(i), a,
                                                                                           timeout=to)
                                        for o, i in zip(outputs, inputs)])

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def gather(self, output_lists: list, inputs: list, opts: Any = None) -> Any:
        root = int(opts.rootRank)
        me = self.g.rank
        return self._go(opts, output_lists, [
            lambda a, i=i, t=t: self.g.gather(t, output_lists[i] if me == root else None, root, a,
                                              timeout=_timeout(opts)) for i, t in enumerate(inputs)])

    def scatter(self, outputs: list, input_lists: list, opts: Any = None) -> Any:
        root = int(opts.rootRank)
        me = self.g.rank
        return self._go(opts, outputs, [
            lambda a, i=i, t=t: self.g.scatter(t, input_lists[i] if me == root else None, root, a,
                                               timeout=_timeout(opts)) for i, t in enumerate(outputs)])

    def all_to_all_single(self, output: Any, input: Any, output_split_sizes: list, input_split_sizes: list,
                          opts: Any = None) -> Any:
        osz, isz = list(output_split_sizes) or None, list(input_split_sizes) or None
        return self._go(opts, [output], [lambda a: self.g.all_to_all_single(output, input, osz, isz, a,
                                                                            timeout=_timeout(opts))])

    alltoall_base = all_to_all_single

    def alltoall(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        import torch

        splits_in = [t.numel() for t in inputs]
        splits_out = [t.numel() for t in outputs]
        inp = torch.cat([t.reshape(-1) for t in inputs])
        out = torch.empty(sum(splits_out), dtype=inp.dtype, device=inp.device)

        def unpack() -> None:
            off = 0
            for t, n in zip(outputs, splits_out):
                t.copy_(out[off:off + n].reshape(t.shape))
                off += n

        return self._go(opts, outputs, [lambda a: self.g.all_to_all_single(out, inp, splits_out, splits_in, a,
                                                                           timeout=_timeout(opts))],
                        unpack, (inp, out))

    def barrier(self, opts: Any = None) -> Any:
        return self._go(opts, [], [lambda a: self.g.barrier(a, timeout=_timeout(opts))])

    # ---- a lost rank: torch.distributed.shrink_group ---------------------------------------
    @property
    def supports_shrinking(self) -> bool:
        return True

    def shrink(self, ranks_to_exclude: list, shrink_flags: int = 0, opts: Any = None) -> "InterlinkProcessGroup":
        """The backend of shrink_group's new group: the survivors' interlink group (``Group.shrink``: an
        agreement among them, then connections of their own; the death of the rank holding torch's store
        does not matter to it). Pending calls of this group end first (a failed group fails them at once),
        whatever ``shrink_flags`` says."""
        new = self.g.shrink(exclude=[int(r) for r in ranks_to_exclude])
        return InterlinkProcessGroup(new.rank, new.size, new)

    # ---- point to point -----------------------------------------------------------------------
    # (asynchronous: a send may wait for its receiver -- one copy, read in place -- so isend must return
    # before the peer posts its irecv, as batch_isend_irecv and ring exchanges need)
    def send(self, tensors: list, dst: int, tag: int = 0) -> Any:
        return _Work([self.g.isend(t, int(dst), int(tag)) for t in tensors], tensors)

    def recv(self, tensors: list, src: int, tag: int = 0) -> Any:
        return _Work([self.g.irecv(t, int(src), int(tag)) for t in tensors], tensors, source=int(src))

    def recv_anysource(self, tensors: list, tag: int = 0) -> Any:
        """``dist.recv(t)`` / ``irecv(t)`` without ``src``: from whichever rank sends first; the Work's
        source rank says which."""
        if len(tensors) != 1:
            raise ValueError(f"interlink backend: recv from any source takes one tensor, got {len(tensors)}")
        w = self.g.irecv_any(tensors[0], int(tag))
        return _Work([w], tensors, source=w)
