"""cuda-ipc: ranks on one host read each other's GPU buffers directly (CUDA IPC), no host memory.

What this module holds (the runtime's device executor, :mod:`interlink.runtime.device_exec`, uses it to
run a Schedule's steps on device buffers):

* :class:`DevBuf` -- a flat, contiguous view of a torch CUDA tensor or a CuPy array (pointer, size,
  dtype, device), validated before any byte moves (:func:`as_devbuf`);
* export / import of memory: a buffer is described to a peer by the CUDA IPC handle of the allocation
  it lives in plus its byte offset there (caching allocators hand out pieces of larger allocations);
  a peer opens each handle once and keeps it open (an LRU of :data:`OPEN_CAP` handles; opening costs
  ~0.5 ms on an H100, so the handles of buffers used again are never reopened);
* :class:`Kernels` -- copy and reduce on the device, with torch (torch tensors: every torch dtype,
  bfloat16 included) or CuPy (CuPy arrays), on the caller's current stream.

IPC itself goes through CuPy's runtime bindings (``cudaIpcGetMemHandle`` / ``cudaIpcOpenMemHandle``;
peer access between GPUs is enabled lazily by the open) and the driver's ``cuMemGetAddressRange``
(ctypes on libcuda, always there with a driver). Several ranks may share one GPU (each process has its
own context; IPC maps the other's memory into it), or each rank may have its own.

Limits: memory from torch's ``expandable_segments`` allocator (cuMemCreate) cannot be exported by the
legacy IPC API; such a call raises a clear error and ``INTERLINK_CUDA_IPC=0`` takes the staged path.
"""

from __future__ import annotations

import collections
import ctypes
import os
import struct
import threading
from typing import Any, Optional

import numpy as np

__all__ = ["DevBuf", "as_devbuf", "available", "Kernels", "export", "open_handle", "DESC"]

OPEN_CAP = 256  # opened peer allocations kept per process (LRU; the evicted one is closed)
HANDLE_BYTES = 64
# one buffer's description for a peer: IPC handle of its allocation, byte offset in it, byte size
DESC = struct.Struct(f"<{HANDLE_BYTES}sQQ")
_NULL_HANDLE = b"\0" * HANDLE_BYTES


def enabled() -> bool:
    """cuda-ipc is on unless INTERLINK_CUDA_IPC=0 (then device arrays take the staged path)."""
    return os.environ.get("INTERLINK_CUDA_IPC", "1") not in ("0", "off", "false", "no")


_AVAILABLE: Optional[bool] = None


def available() -> bool:
    """CuPy imports and sees a CUDA device (checked once)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        try:
            import cupy

            _AVAILABLE = cupy.cuda.runtime.getDeviceCount() > 0
        except Exception:  # noqa: BLE001 - no CuPy, no driver, no device
            _AVAILABLE = False
    return _AVAILABLE


# ---- device buffers ------------------------------------------------------------------------------


def _torch_np_dtype(t: Any, name: str, reducing: bool) -> np.dtype:
    import torch

    table = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64,
             torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32, torch.int64: np.int64,
             torch.uint8: np.uint8, torch.bool: np.bool_, torch.complex64: np.complex64,
             torch.complex128: np.complex128}
    for nm, npt in (("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64)):
        if hasattr(torch, nm):
            table[getattr(torch, nm)] = npt
    if t.dtype in table:
        return np.dtype(table[t.dtype])
    if t.dtype == torch.bfloat16:
        try:
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        except ImportError:
            if reducing:
                raise TypeError(f"{name} is bfloat16: reductions on bfloat16 need ml_dtypes (pip install "
                                f"ml_dtypes); moving it (broadcast, gather, ...) works without") from None
            return np.dtype(np.uint16)
    raise TypeError(f"{name} has dtype {t.dtype}, which interlink cannot communicate")


class DevBuf:
    """A flat, C-contiguous device array: what the device executor reads and writes."""

    __slots__ = ("obj", "kind", "dtype", "size", "nbytes", "ptr", "device", "stream")

    def __init__(self, obj: Any, kind: str, dtype: np.dtype, size: int, ptr: int, device: int) -> None:
        self.obj = obj  # the flat torch tensor / CuPy array (keeps the memory alive)
        self.kind = kind  # "torch" | "cupy"
        self.dtype = dtype
        self.size = size
        self.nbytes = size * dtype.itemsize
        self.ptr = ptr
        self.device = device
        self.stream: Any = None  # the caller's current stream at the call (the call's work goes on it)

    def overlaps(self, other: "DevBuf") -> bool:
        return (self.nbytes > 0 and other.nbytes > 0 and self.ptr < other.ptr + other.nbytes
                and other.ptr < self.ptr + self.nbytes)

    def __repr__(self) -> str:
        return f"DevBuf({self.kind} cuda:{self.device} {self.dtype} n={self.size} @0x{self.ptr:x})"


def device_kind(x: Any) -> Optional[str]:
    """'torch' for a torch CUDA tensor, 'cupy' for a CuPy array, a registered backend's kind for its
    arrays, else None (cheap: no imports)."""
    for accepts, kind, _ in _EXTRA:
        if accepts(x):
            return kind
    mod = type(x).__module__
    if mod.startswith("torch"):
        dev = getattr(x, "device", None)
        return "torch" if getattr(dev, "type", None) == "cuda" else None
    if mod.startswith("cupy"):
        return "cupy"
    return None


def as_devbuf(x: Any, name: str = "tensor", writable: bool = True, reducing: bool = False) -> DevBuf:
    """Validate a device array and describe it (ValueError / TypeError before any byte moves)."""
    kind = device_kind(x)
    if kind == "torch":
        if not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous (got stride {tuple(x.stride())} for shape "
                             f"{tuple(x.shape)}); call .contiguous() first")
        if writable and x.requires_grad and x.is_leaf:
            raise ValueError(f"{name} is a leaf tensor that requires grad; pass tensor.detach() or use torch.no_grad()")
        t = x.detach().reshape(-1)
        return DevBuf(t, "torch", _torch_np_dtype(t, name, reducing), t.numel(), t.data_ptr(), t.device.index or 0)
    if kind == "cupy":
        if not x.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
        if x.dtype.hasobject or x.dtype.fields is not None:
            raise TypeError(f"{name} has dtype {x.dtype}, which cannot be communicated")
        a = x.reshape(-1)
        return DevBuf(a, "cupy", np.dtype(a.dtype), a.size, int(a.data.ptr), a.device.id)
    raise TypeError(f"{name}: {type(x).__name__} is not a CUDA array the cuda-ipc path takes")


def current_stream(buf: DevBuf) -> Any:
    """The caller's current stream on the buffer's device: the call's device work is queued on it, after
    whatever produced the data (as NCCL orders a collective on the caller's stream), from any thread."""
    if buf.kind == "torch":
        import torch

        return torch.cuda.current_stream(buf.device)
    import cupy

    with cupy.cuda.Device(buf.device):
        return cupy.cuda.get_current_stream()


def empty_like(buf: DevBuf) -> DevBuf:
    """A new device array shaped like ``buf`` (same kind, dtype, device)."""
    if buf.kind == "torch":
        import torch

        t = torch.empty_like(buf.obj)
        return DevBuf(t, "torch", buf.dtype, buf.size, t.data_ptr(), buf.device)
    import cupy

    with cupy.cuda.Device(buf.device):
        a = cupy.empty_like(buf.obj)
    return DevBuf(a, "cupy", buf.dtype, buf.size, int(a.data.ptr), buf.device)


# ---- IPC -----------------------------------------------------------------------------------------

_libcuda: Any = None
_lock = threading.Lock()
_opened: "collections.OrderedDict[tuple[int, bytes], int]" = collections.OrderedDict()


def _cuda() -> Any:
    global _libcuda
    if _libcuda is None:
        _libcuda = ctypes.CDLL("libcuda.so.1")
    return _libcuda


def _base_of(ptr: int, device: int) -> int:
    """Start of the allocation that holds device pointer ``ptr`` (cuMemGetAddressRange)."""
    import cupy

    cupy.cuda.runtime.setDevice(device)  # makes the device's primary context current on this thread
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    rc = _cuda().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
    if rc != 0:
        raise RuntimeError(f"cuMemGetAddressRange(0x{ptr:x}) failed with CUDA error {rc}")
    return int(base.value)


def export(buf: Optional[DevBuf]) -> bytes:
    """This buffer's description for a peer (DESC.size bytes); a null description for no buffer.
    The handle is asked for on every call (not cached by address: a freed and reallocated block at
    the same address is a new allocation with a new handle)."""
    if buf is None or buf.nbytes == 0:
        return DESC.pack(_NULL_HANDLE, 0, 0)
    import cupy

    base = _base_of(buf.ptr, buf.device)
    try:
        h = cupy.cuda.runtime.ipcGetMemHandle(base)
    except Exception as e:  # noqa: BLE001 - e.g. memory from cuMemCreate (torch expandable_segments)
        raise RuntimeError(f"cannot export {buf} for CUDA IPC ({e}); memory from torch's expandable_segments "
                           f"allocator cannot be shared this way: unset it, or set INTERLINK_CUDA_IPC=0 for the "
                           f"staged path") from None
    return DESC.pack(bytes(h), buf.ptr - base, buf.nbytes)


def open_handle(desc: bytes, device: int) -> tuple[int, int]:
    """(pointer in this process, byte size) of a peer's buffer described by ``desc``; (0, 0) for none.
    Each allocation is opened once per device and kept open (LRU of OPEN_CAP)."""
    h, off, nbytes = DESC.unpack(desc)
    if nbytes == 0:
        return 0, 0
    key = (device, h)
    with _lock:
        base = _opened.get(key)
        if base is not None:
            _opened.move_to_end(key)
            return base + off, nbytes
    import cupy

    with cupy.cuda.Device(device):
        base = int(cupy.cuda.runtime.ipcOpenMemHandle(h))
    with _lock:
        _opened[key] = base
        while len(_opened) > OPEN_CAP:
            (dev, _), old = _opened.popitem(last=False)
            try:
                with cupy.cuda.Device(dev):
                    cupy.cuda.runtime.ipcCloseMemHandle(old)
            except Exception:  # noqa: BLE001 - the peer may be gone
                pass
    return base + off, nbytes


_events: dict[int, tuple[int, bytes]] = {}  # device -> (this process's interprocess event, its IPC handle)
_peer_events: dict[tuple[int, bytes], int] = {}


def own_event(device: int) -> tuple[int, bytes]:
    """This process's interprocess CUDA event on ``device`` and its IPC handle (made once). Recorded on
    the call's stream at every signal, so a peer orders its stream after our work with no host sync."""
    ev = _events.get(device)
    if ev is None:
        import cupy

        rt = cupy.cuda.runtime
        with cupy.cuda.Device(device):
            e = rt.eventCreateWithFlags(2 | 4)  # cudaEventDisableTiming | cudaEventInterprocess
            ev = _events[device] = (e, bytes(rt.ipcGetEventHandle(e)))
    return ev


def peer_event(handle: bytes, device: int) -> int:
    """A peer's interprocess event, opened once."""
    key = (device, handle)
    e = _peer_events.get(key)
    if e is None:
        import cupy

        with cupy.cuda.Device(device):
            e = _peer_events[key] = int(cupy.cuda.runtime.ipcOpenEventHandle(handle))
    return e


def mps_active() -> bool:
    """Is an MPS control daemon reachable (CUDA_MPS_PIPE_DIRECTORY, else the default pipe directory)?
    Under MPS the kernels of the processes sharing a GPU run concurrently instead of time-sliced."""
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    return os.path.exists(os.path.join(pipe, "control"))


_VIEWS: dict[tuple, Any] = {}

_CUPY_UFUNC = {"sum": "add", "avg": "add", "prod": "multiply", "min": "minimum", "max": "maximum",
               "band": "bitwise_and", "bor": "bitwise_or", "bxor": "bitwise_xor"}


class Kernels:
    """Device work of one call, on the caller's current stream of ``device``: views of raw pointers,
    copies (cudaMemcpyAsync) and reductions (torch or CuPy elementwise kernels)."""

    def __init__(self, kind: str, device: int, dtype: np.dtype, like: Any, op: str, stream: Any = None) -> None:
        import cupy

        self.kind = kind
        self.device = device
        self.dtype = dtype
        self.op = op
        self.cupy = cupy
        self._dev = cupy.cuda.Device(device)
        if kind == "torch":
            import torch

            self.torch = torch
            self.tdtype = like.dtype
            self.stream = stream if stream is not None else torch.cuda.current_stream(device)
            self.stream_ptr = self.stream.cuda_stream
        else:
            self.torch = None
            self.tdtype = None
            self.stream = stream if stream is not None else cupy.cuda.get_current_stream()
            self.stream_ptr = self.stream.ptr
        self.event = own_event(device)[0]

    def __enter__(self) -> "Kernels":
        """The call's device current, and its stream the library's current one (torch's reductions and
        CuPy's ufuncs go on it)."""
        self._dev.__enter__()
        self._ctx = self.torch.cuda.stream(self.stream) if self.kind == "torch" else self.stream
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)
        self._dev.__exit__(*exc)

    def view(self, ptr: int, count: int) -> Any:
        """A typed device array over ``count`` elements at ``ptr`` (no ownership; cached across calls:
        a view is only an address, valid whenever the call that uses it holds memory there)."""
        key = (self.kind, self.device, self.dtype, self.tdtype, ptr, count)
        v = _VIEWS.get(key)
        if v is None:
            cp = self.cupy
            isz = self.dtype.itemsize
            mem = cp.cuda.UnownedMemory(ptr, max(1, count * isz), None, self.device)
            raw = cp.ndarray((count * isz,), cp.uint8, cp.cuda.MemoryPointer(mem, 0))
            if self.kind == "torch":
                v = self.torch.as_tensor(raw, device=f"cuda:{self.device}").view(self.tdtype)
            else:
                v = raw.view(self.dtype)
            if len(_VIEWS) >= 512:
                _VIEWS.clear()
            _VIEWS[key] = v
        return v

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            self.cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, 3, self.stream_ptr)  # 3: device to device

    def reduce(self, dst: int, src: int, count: int) -> None:
        """dst = dst (op) src, elementwise, ``count`` elements."""
        if not count:
            return
        d, s = self.view(dst, count), self.view(src, count)
        if self.kind == "torch":
            t = self.torch
            op = self.op
            if op in ("sum", "avg"):
                d.add_(s)
            elif op == "prod":
                d.mul_(s)
            elif op == "min":
                t.minimum(d, s, out=d)
            elif op == "max":
                t.maximum(d, s, out=d)
            elif op == "band":
                d.bitwise_and_(s)
            elif op == "bor":
                d.bitwise_or_(s)
            else:
                d.bitwise_xor_(s)
        else:
            getattr(self.cupy, _CUPY_UFUNC[self.op])(d, s, out=d)

    def avg(self, ptr: int, count: int, nranks: int) -> None:
        """SUM -> AVG in place: floats divide, integers truncate toward zero (as the host path)."""
        if nranks == 1 or not count:
            return
        v = self.view(ptr, count)
        if self.kind == "torch":
            if v.is_floating_point() or v.is_complex():
                # by a device tensor: torch turns a division by a Python scalar into a multiplication by
                # its reciprocal, one ulp off the host path's (and numpy's) true division
                v.div_(self.torch.full((1,), nranks, dtype=v.dtype, device=v.device))
            else:
                v.copy_(self.torch.div(v, nranks, rounding_mode="trunc"))
        else:
            from ..ops import finish_avg

            finish_avg(v, nranks)  # numpy ufuncs dispatch to CuPy's

    def empty(self, nbytes: int) -> tuple[Any, int]:
        """A device buffer of this call's kind (from the library's caching allocator) and its pointer."""
        if self.kind == "torch":
            t = self.torch.empty(max(1, nbytes), dtype=self.torch.uint8, device=f"cuda:{self.device}")
            return t, t.data_ptr()
        a = self.cupy.empty(max(1, nbytes), dtype=self.cupy.uint8)
        return a, int(a.data.ptr)

    def sync(self) -> None:
        self.stream.synchronize()

    def record(self) -> None:
        """Mark this point of the stream for the peers (they wait on it before reading our buffers)."""
        self.cupy.cuda.runtime.eventRecord(self.event, self.stream_ptr)

    def wait(self, peer_event: int) -> None:
        """Order this stream after the peer's last recorded point (GPU side; the host does not block)."""
        self.cupy.cuda.runtime.streamWaitEvent(self.stream_ptr, peer_event, 0)


# ---- backends: CUDA (torch, CuPy) and whatever registers ------------------------------------------


class _Cuda:
    """What the runtime's device path asks of a kind of device memory: validation, the caller's stream,
    temporaries, export / import of buffers and events, and the kernels."""

    available = staticmethod(available)
    as_devbuf = staticmethod(as_devbuf)
    current_stream = staticmethod(current_stream)
    empty_like = staticmethod(empty_like)
    export = staticmethod(export)
    open_handle = staticmethod(open_handle)
    own_event = staticmethod(own_event)
    peer_event = staticmethod(peer_event)
    Kernels = Kernels


_CUDA = _Cuda()
_EXTRA: list[tuple[Any, str, Any]] = []


def register_backend(kind: str, accepts: Any, backend: Any) -> None:
    """Another kind of one-sided memory for the device path: ``accepts(x)`` tells its arrays, ``backend``
    has _Cuda's attributes. The tests register a host-memory one (cross-memory attach for the peers'
    buffers), so the device executor runs in CI without a GPU."""
    unregister_backend(kind)
    _EXTRA.insert(0, (accepts, kind, backend))


def unregister_backend(kind: str) -> None:
    _EXTRA[:] = [e for e in _EXTRA if e[1] != kind]


def backend(kind: str) -> Any:
    for _, k, b in _EXTRA:
        if k == kind:
            return b
    return _CUDA
