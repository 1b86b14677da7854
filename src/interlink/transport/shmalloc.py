"""Arrays that live in shared memory: the zero-copy side of the shared-memory transport.

``interlink.empty(shape, dtype)`` (and ``zeros``) return an ordinary numpy array whose pages are a
memfd of this process (like NCCL's ``ncclMemAlloc`` + buffer registration). When such an array is a
collective's input, the ranks on this host read it in place: they map the same memfd (through
``/proc/<pid>/fd/<n>``, which needs the same ptrace permission as cross-memory attach) instead of
copying it into a shared slot first or pulling it with ``process_vm_readv``. Nothing is named in
/dev/shm, so nothing can leak: the pages go when the last array viewing them and the last peer mapping
are gone.

Registry: every arena is (start address, end address, fd, serial); ``lookup`` finds the arena holding a
buffer. A peer caches its mappings by (pid, serial) and checks the memfd's name (which carries the
serial) when it opens one, so a recycled fd number can never map the wrong memory.
"""

from __future__ import annotations

import bisect
import collections
import ctypes
import mmap
import os
import threading
import weakref
from typing import Any, Optional

import numpy as np

_lock = threading.Lock()
_starts: list[int] = []  # sorted arena start addresses
_arenas: dict[int, tuple[int, int, int]] = {}  # start -> (end, fd, serial)
_serial = 0
PAGE = mmap.PAGESIZE


def _release(start: int, fd: int) -> None:
    with _lock:
        if start in _arenas:
            del _arenas[start]
            _starts.remove(start)
    try:
        os.close(fd)
    except OSError:  # pragma: no cover
        pass


def empty(shape: Any, dtype: Any = np.float32) -> np.ndarray:
    """An uninitialised numpy array in shared memory that interlink's collectives read in place."""
    global _serial
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise TypeError(f"dtype {dt} cannot live in shared memory")
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    size = max(PAGE, -(-nbytes // PAGE) * PAGE)
    with _lock:
        _serial += 1
        serial = _serial
    fd = os.memfd_create(f"interlink-arena-{serial}", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size)
    except BaseException:
        os.close(fd)
        raise
    start = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    with _lock:
        bisect.insort(_starts, start)
        _arenas[start] = (start + size, fd, serial)
    weakref.finalize(mm, _release, start, fd)  # the fd lives exactly as long as the mapping
    return np.ndarray(shape, dtype=dt, buffer=mm)


def zeros(shape: Any, dtype: Any = np.float32) -> np.ndarray:
    a = empty(shape, dtype)
    a.fill(0)  # writes every page: faults now, not in the first collective
    return a


def lookup(addr: int, nbytes: int) -> Optional[tuple[int, int, int, int]]:
    """(serial, fd, offset, arena size) of the arena holding [addr, addr + nbytes), or None."""
    with _lock:
        i = bisect.bisect_right(_starts, addr) - 1
        if i < 0:
            return None
        start = _starts[i]
        end, fd, serial = _arenas[start]
    if addr + nbytes > end:
        return None
    return serial, fd, addr - start, end - start


class PeerArenas:
    """The arenas of other processes this rank has mapped, most recently used last (at most `keep`)."""

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        self._maps: collections.OrderedDict[tuple[int, int], mmap.mmap] = collections.OrderedDict()

    def view(self, pid: int, fd: int, serial: int, size: int, offset: int, dtype: np.dtype, count: int) -> np.ndarray:
        """count elements of dtype at offset in process pid's arena; OSError if it cannot be mapped."""
        key = (pid, serial)
        mm = self._maps.get(key)
        if mm is None:
            path = f"/proc/{pid}/fd/{fd}"
            if os.readlink(path) != f"/memfd:interlink-arena-{serial} (deleted)":
                raise OSError(f"fd {fd} of pid {pid} is no longer interlink arena {serial}")
            f = os.open(path, os.O_RDWR)
            try:
                mm = mmap.mmap(f, size)
            finally:
                os.close(f)
            self._maps[key] = mm
            if len(self._maps) > self.keep:
                self._maps.popitem(last=False)  # unmapped when no array views it any more
        else:
            self._maps.move_to_end(key)
        return np.ndarray((count,), dtype=dtype, buffer=mm, offset=offset)
