"""Linux futexes on shared memory, through ctypes: how a waiting rank blocks instead of spinning.

A waiter sleeps until the 32-bit word at an address changes (or a timeout passes); a waker bumps the
word and wakes the sleepers. Works across processes on a MAP_SHARED mapping (we use memfd pages).
Where futexes are unavailable (not Linux, unknown architecture) ``available`` is False and callers
fall back to short sleeps.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading

_MACHINE = platform.machine().lower()
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "i686": 240, "i386": 240}.get(_MACHINE)
FUTEX_WAIT, FUTEX_WAKE = 0, 1  # shared (not PRIVATE): the word lives in memory shared by processes

try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _syscall = _libc.syscall
    _syscall.restype = ctypes.c_long
    available = _SYS_FUTEX is not None and os.name == "posix" and platform.system() == "Linux"
except (OSError, AttributeError):  # pragma: no cover
    available = False


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def wait(addr: int, expected: int, timeout: float) -> None:
    """Sleep while *addr == expected, at most ``timeout`` seconds (returns early on wake/change)."""
    ts = _Timespec(int(timeout), int((timeout % 1.0) * 1e9))
    _syscall(_SYS_FUTEX, ctypes.c_void_p(addr), FUTEX_WAIT, ctypes.c_uint32(expected & 0xFFFFFFFF),
             ctypes.byref(ts), None, 0)


def wake(addr: int, n: int = 1 << 30) -> None:
    _syscall(_SYS_FUTEX, ctypes.c_void_p(addr), FUTEX_WAKE, n, None, None, 0)


_FENCE_LOCK = threading.Lock()
_FENCE_WORD = ctypes.c_uint32(0)
FUTEX_PRIVATE_FLAG = 128


def _fence_lock(_acquire=_FENCE_LOCK.acquire, _release=_FENCE_LOCK.release) -> None:
    _acquire()
    _release()


def _fence_futex() -> None:
    if available:
        _syscall(_SYS_FUTEX, ctypes.c_void_p(ctypes.addressof(_FENCE_WORD)), FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1,
                 None, None, 0)


#: A full memory barrier: stores before it are visible to other cores before loads after it run. The
#: doorbell's handshake needs one on each side (the sleeper stores its sleeping flag, then loads the words it
#: waits for; the waker stores what it publishes, then loads the flag): without it a core may load before its
#: own store is visible, both sides read the old values, and the sleeper misses its wake-up and sleeps its
#: whole timeout (tests/test_transport_bell.py::test_the_doorbell_handshake_fences). On x86-64 a lock's
#: acquire and release are locked instructions (a full barrier, about 0.1 us from Python); elsewhere a futex
#: wake on a private word, which passes the kernel's smp_mb().
fence = _fence_lock if _MACHINE in ("x86_64", "amd64") else _fence_futex


def address_of(buf) -> int:
    """Address of a writable buffer's first byte (keeps an export on it)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))
