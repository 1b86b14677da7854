"""A host-memory stand-in for CUDA IPC, so CI runs the device executor (runtime.device_exec) without a GPU.

FakeDev is a "device array": a numpy array behind an object with no buffer protocol, so only the
device path can take it. Its backend describes a buffer by (pid, address); a peer's "opened" buffer is
a tagged address that the fake kernels read by cross-memory attach (process_vm_readv) -- the pulls of
the device executor, across real processes, exactly as cuda-ipc's copies from IPC-mapped memory. Events
and streams are no-ops (numpy work is done when the call returns, like a synchronised stream).
"""

from __future__ import annotations

import ctypes
import os
import struct
from typing import Any

import numpy as np

from interlink.transport import cma, cuda_ipc

KIND = "fakeipc"
_REMOTE = 1 << 62
_pids: list[int] = []


class FakeDev:
    def __init__(self, a: Any, copy: bool = True) -> None:
        self.a = np.array(a, copy=True) if copy else a

    @property
    def shape(self) -> tuple:
        return self.a.shape

    @property
    def dtype(self) -> np.dtype:
        return self.a.dtype

    def __getitem__(self, sl: Any) -> "FakeDev":
        return FakeDev(self.a[sl], copy=False)  # a view, as a torch/CuPy slice

    def __setitem__(self, sl: Any, v: "FakeDev") -> None:
        self.a[sl] = v.a

    def numpy(self) -> np.ndarray:
        return self.a.copy()


def _arr(ptr: int, nbytes: int, dtype: np.dtype) -> np.ndarray:
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * max(1, nbytes)).from_address(ptr))[:nbytes]
    return raw.view(dtype)


def _remote(ptr: int) -> tuple[int, int] | None:
    if ptr & _REMOTE:
        return _pids[(ptr >> 47) & 0x7FFF], ptr & ((1 << 47) - 1)
    return None


class Kernels:
    def __init__(self, kind: str, device: int, dtype: np.dtype, like: Any, op: str, stream: Any = None) -> None:
        from interlink.ops import ReduceOp, ufunc

        self.kind, self.device, self.dtype = kind, device, dtype
        rop = ReduceOp(op)
        self.fn = ufunc(ReduceOp.SUM if rop is ReduceOp.AVG else rop)
        self.hold: list = []

    def __enter__(self) -> "Kernels":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.hold.clear()

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        if not nbytes:
            return
        r = _remote(src)
        if r is not None:
            cma.read(r[0], r[1], dst, nbytes)
        else:
            ctypes.memmove(dst, src, nbytes)

    def reduce(self, dst: int, src: int, count: int) -> None:
        if not count:
            return
        nb = count * self.dtype.itemsize
        if _remote(src) is not None:
            tmp = np.empty(nb, np.uint8)
            self.copy(tmp.ctypes.data, src, nb)
            s = tmp.view(self.dtype)
        else:
            s = _arr(src, nb, self.dtype)
        d = _arr(dst, nb, self.dtype)
        self.fn(d, s, out=d)

    def avg(self, ptr: int, count: int, nranks: int) -> None:
        from interlink.ops import finish_avg

        finish_avg(_arr(ptr, count * self.dtype.itemsize, self.dtype), nranks)

    def empty(self, nbytes: int) -> tuple[Any, int]:
        a = np.empty(max(1, nbytes), np.uint8)
        return a, a.ctypes.data

    def sync(self) -> None:
        pass

    def record(self) -> None:
        pass

    def wait(self, peer_event: int) -> None:
        pass


class Backend:
    Kernels = Kernels

    @staticmethod
    def available() -> bool:
        return cma.available

    @staticmethod
    def as_devbuf(x: FakeDev, name: str, writable: bool, reducing: bool) -> cuda_ipc.DevBuf:
        a = x.a
        if not a.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
        if writable and not a.flags.writeable:
            raise ValueError(f"{name} is read-only")
        if reducing:
            from interlink.ops import dtype_kind

            dtype_kind(a.dtype)
        f = a.reshape(-1)
        return cuda_ipc.DevBuf(f, KIND, a.dtype, f.size, f.ctypes.data if f.size else 0, 0)

    @staticmethod
    def current_stream(buf: cuda_ipc.DevBuf) -> None:
        return None

    @staticmethod
    def empty_like(buf: cuda_ipc.DevBuf) -> cuda_ipc.DevBuf:
        a = np.empty_like(buf.obj)
        return cuda_ipc.DevBuf(a, KIND, buf.dtype, buf.size, a.ctypes.data, 0)

    @staticmethod
    def export(buf: Any) -> bytes:
        if buf is None or buf.nbytes == 0:
            return cuda_ipc.DESC.pack(b"", 0, 0)
        return cuda_ipc.DESC.pack(struct.pack("<Q", os.getpid()), buf.ptr, buf.nbytes)

    @staticmethod
    def open_handle(desc: bytes, device: int) -> tuple[int, int]:
        h, off, nbytes = cuda_ipc.DESC.unpack(desc)
        if nbytes == 0:
            return 0, 0
        pid = struct.unpack_from("<Q", h)[0]
        if pid not in _pids:
            _pids.append(pid)
        return _REMOTE | (_pids.index(pid) << 47) | off, nbytes

    @staticmethod
    def own_event(device: int) -> tuple[int, bytes]:
        return 0, b"\0" * 64

    @staticmethod
    def peer_event(handle: bytes, device: int) -> int:
        return 0


def install() -> None:
    cma.allow_peers()
    cuda_ipc.register_backend(KIND, lambda x: isinstance(x, FakeDev), Backend())
