"""GPU arrays in every call, by the host-staged path: device -> (pinned) host -> the host transports
(shared memory, TCP) -> host -> device.

This is issue 8's *staged* baseline (NADDOD, "GPU Communication Technology Accelerating AI Development",
Jan 2024; docs/reference.md, 'Links': without GPUDirect, data is staged through pinned host memory, two
copies). Device arrays of ranks on one host take the cuda-ipc path instead from a size on
(runtime/device_exec.py, transport/cuda_ipc.py, docs/devices.md); NCCL is not built yet.

How a call uses it: the runtime asks :func:`stage` for every array argument that lives on a device.
A :class:`Staged` buffer holds a flat host copy (pinned where the library can pin) that the collective
runs on; before any byte moves it is filled from the device (``download``, after synchronising the
producing stream, so the host sees finished data); when the collective completes the runtime calls
``upload`` for the arguments it wrote, and the result lands back on the device (stream-ordered, then
synchronised, so the caller can use it at once, as with a synchronous CPU call).

Adapters are tried in order, the first whose ``accepts(x)`` is true wins (like NCCL's transport
registry): torch CUDA tensors, CuPy arrays, then anything with ``__cuda_array_interface__`` or a CUDA
``__dlpack_device__`` (through CuPy). :func:`register_adapter` adds one in front (tests use a fake
device; other accelerators can plug in). torch and CuPy are imported lazily, only when such an array
is passed. Host staging buffers are cached per (device, dtype, size) and reused across calls.

The torch and CuPy adapters ran on an H100 (tests/test_runtime_devices.py's gpu test, 1-4 ranks on one
GPU, 2026-11-24); in CI the staging logic is tested with a fake device adapter that pools its host
buffers as these do.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Protocol

import numpy as np

from . import arrays

__all__ = ["Staged", "Adapter", "is_device_array", "stage", "register_adapter", "unregister_adapter"]


class Staged(Protocol):
    """One device array and its host copy."""

    device: str
    host: np.ndarray  # flat, C-contiguous; the collective runs on it

    def download(self) -> None:
        """device -> host (after the data's producer has finished)."""

    def upload(self) -> None:
        """host -> device (synchronised before returning)."""


class Adapter(Protocol):
    name: str

    def accepts(self, x: Any) -> bool: ...

    def stage(self, x: Any, name: str, writable: bool) -> Staged: ...


_ADAPTERS: list[Adapter] = []
_LOCK = threading.Lock()


def register_adapter(adapter: Adapter, first: bool = True) -> None:
    """Add an adapter (in front by default: it is asked before the built-in ones)."""
    with _LOCK:
        if first:
            _ADAPTERS.insert(0, adapter)
        else:
            _ADAPTERS.append(adapter)


def unregister_adapter(adapter: Adapter) -> None:
    with _LOCK:
        if adapter in _ADAPTERS:
            _ADAPTERS.remove(adapter)


def _adapter_for(x: Any) -> Optional[Adapter]:
    for a in _ADAPTERS:
        try:
            if a.accepts(x):
                return a
        except Exception:  # noqa: BLE001 - an adapter that cannot tell is not the one
            continue
    return None


def is_device_array(x: Any) -> bool:
    """True for an array that lives in device memory and that an adapter can stage."""
    if isinstance(x, np.ndarray) or x is None:
        return False
    return _adapter_for(x) is not None


def stage(x: Any, name: str = "tensor", writable: bool = True, download: bool = True) -> Staged:
    """A host staging buffer for device array ``x``, filled from the device unless ``download`` is
    False (pure outputs). Raises TypeError / ValueError (bad dtype, non-contiguous) before any copy."""
    a = _adapter_for(x)
    if a is None:
        raise TypeError(f"{name}: no device adapter accepts {type(x).__name__}")
    st = a.stage(x, name, writable)
    if download:
        st.download()
    return st


# ---- host staging buffers, cached ------------------------------------------------------------------

_POOL: dict[tuple, list] = {}
_POOL_LIMIT = 64


def _pooled(key: tuple, make: Callable[[], Any]) -> Any:
    """A cached host buffer for ``key``; buffers are handed out one per staged argument of a call and
    come back to the pool when the call's Staged objects are dropped."""
    with _LOCK:
        free = _POOL.get(key)
        if free:
            return free.pop()
    return make()


def _give_back(key: tuple, buf: Any) -> None:
    with _LOCK:
        free = _POOL.setdefault(key, [])
        if len(free) < 4 and sum(len(v) for v in _POOL.values()) < _POOL_LIMIT:
            free.append(buf)


# ---- torch (CUDA tensors) --------------------------------------------------------------------------


class _TorchStaged:
    def __init__(self, t: Any, name: str) -> None:
        import torch

        self.t = t
        self.device = str(t.device)
        n = t.numel()
        self.key = ("torch", self.device, t.dtype, n)
        pin = bool(torch.cuda.is_available())

        def make() -> Any:
            return torch.empty(n, dtype=t.dtype, device="cpu", pin_memory=pin)

        self.buf = _pooled(self.key, make)
        from .arrays import as_flat

        self.host = as_flat(self.buf, name)  # numpy view of the (pinned) host tensor

    def download(self) -> None:
        # copy_ is ordered on the tensor's current stream; synchronise so that the host sees the data
        self.buf.copy_(self.t.reshape(-1), non_blocking=True)
        _torch_sync(self.t)

    def upload(self) -> None:
        self.t.reshape(-1).copy_(self.buf, non_blocking=True)
        _torch_sync(self.t)

    def __del__(self) -> None:
        try:
            _give_back(self.key, self.buf)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _torch_sync(t: Any) -> None:
    import torch

    if t.device.type == "cuda":
        torch.cuda.current_stream(t.device).synchronize()


class _TorchAdapter:
    name = "torch"

    def accepts(self, x: Any) -> bool:
        mod = type(x).__module__
        return mod.startswith("torch") and hasattr(x, "device") and getattr(x.device, "type", "cpu") != "cpu"

    def stage(self, x: Any, name: str, writable: bool) -> Staged:
        if not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous (got stride {tuple(x.stride())} for shape "
                             f"{tuple(x.shape)}); call .contiguous() first")
        if writable and x.requires_grad and x.is_leaf:
            raise ValueError(f"{name} is a leaf tensor that requires grad; pass tensor.detach() or use torch.no_grad()")
        return _TorchStaged(x.detach(), name)


# ---- CuPy and anything CuPy can view (__cuda_array_interface__, CUDA DLPack) ---------------------


class _CupyStaged:
    def __init__(self, a: Any, name: str) -> None:
        import cupy

        self.a = a
        self.device = f"cuda:{a.device.id}"
        self.key = ("cupy", self.device, a.dtype.str, a.size)

        def make() -> Any:
            mem = cupy.cuda.alloc_pinned_memory(max(1, a.nbytes))
            return np.frombuffer(mem, dtype=a.dtype, count=a.size), mem

        self.buf = _pooled(self.key, make)
        self.host = self.buf[0]

    def download(self) -> None:
        self.a.ravel().get(out=self.host)
        self.a.device.synchronize()

    def upload(self) -> None:
        self.a.ravel().set(self.host)
        self.a.device.synchronize()

    def __del__(self) -> None:
        try:
            _give_back(self.key, self.buf)
        except Exception:  # noqa: BLE001
            pass


class _CupyAdapter:
    name = "cupy"

    def accepts(self, x: Any) -> bool:
        mod = type(x).__module__
        if mod.startswith("cupy"):
            return True
        if mod.startswith("torch"):
            return False  # the torch adapter's (and asking a CPU tensor for its CUDA interface costs 3 us)
        if hasattr(x, "__cuda_array_interface__"):
            return True
        dev = getattr(x, "__dlpack_device__", None)
        return dev is not None and int(dev()[0]) in (2, 13)  # kDLCUDA, kDLCUDAManaged

    def stage(self, x: Any, name: str, writable: bool) -> Staged:
        try:
            import cupy
        except ImportError:
            raise TypeError(f"{name} lives in GPU memory ({type(x).__name__}); staging it needs CuPy "
                            f"(pip install cupy-cuda12x) or a torch CUDA tensor") from None
        a = x if isinstance(x, cupy.ndarray) else cupy.asarray(x)  # a view, no copy
        if not a.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
        if a.dtype.hasobject:
            raise TypeError(f"{name} has dtype {a.dtype}, which cannot be communicated")
        return _CupyStaged(a, name)


register_adapter(_TorchAdapter(), first=False)
register_adapter(_CupyAdapter(), first=False)


class Staging:
    """The device arrays of one call (GPU tensors, CuPy arrays: :mod:`interlink.devices`): the call runs
    on host copies; the ones it writes go back to the device when it completes (the staged path)."""

    __slots__ = ("back", "keep")

    def __init__(self) -> None:
        self.back: list = []
        # every Staged of the call, read-only inputs too, lives until the call is done: a dropped one gives
        # its host buffer back to the pool, where the next argument of the same shape would take it (a
        # scatter list of two same-shaped tensors then sent the last one twice: seen on a real GPU)
        self.keep: list = []

    def flat(self, x: Any, name: str, writable: bool = True, reducing: bool = False, download: bool = True,
             upload: bool = True) -> np.ndarray:
        if type(x) is np.ndarray or not is_device_array(x):
            return arrays.as_flat(x, name, writable, reducing)
        staged = stage(x, name, writable, download=download)
        self.keep.append(staged)
        if writable and upload:
            self.back.append(staged)
        return arrays.as_flat(staged.host, name, writable, reducing)

    def upload(self) -> None:
        for staged in self.back:
            staged.upload()

    def wrap(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        if not self.keep:
            return fn

        def run() -> Any:  # holds self, so the host copies stay ours until the call has run
            res = fn()
            self.upload()
            self.keep.clear()
            return res
        return run
