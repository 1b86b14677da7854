"""Cross-memory attach (Linux process_vm_readv / process_vm_writev): copy straight out of, or into, a
peer's memory.

A large message between ranks of one host then costs one copy (the receiver reads the sender's buffer
in place, as MPICH's and Open MPI's shared-memory transports do) instead of two through a shared ring.
Needs ptrace permission over the peer (same user; under Yama ptrace_scope=1 each rank declares
PR_SET_PTRACER_ANY). Probed per pair at connection time; INTERLINK_CMA=0 turns it off.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading

PR_SET_PTRACER = 0x59616D61
PR_SET_PTRACER_ANY = ctypes.c_ulong(-1 & 0xFFFFFFFFFFFFFFFF)


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


# The calls take the iovecs' addresses as plain integers (c_void_p), not POINTER(_Iovec) with byref:
# ctypes converts an int in a fraction of the time (a 4 KiB read of a peer: 6.7 -> ~2 us a call on a
# 2-core x86 VM, most of it the syscall). Each thread fills its own pair of iovecs (_iov).
_ARGTYPES = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _readv = _libc.process_vm_readv
    _readv.restype = ctypes.c_ssize_t
    _readv.argtypes = _ARGTYPES
    _writev = _libc.process_vm_writev
    _writev.restype = ctypes.c_ssize_t
    _writev.argtypes = _ARGTYPES
    available = platform.system() == "Linux" and os.environ.get("INTERLINK_CMA", "1") != "0"
except (OSError, AttributeError):  # pragma: no cover
    available = False

_local = threading.local()
_addressof, _c_char = ctypes.addressof, ctypes.c_char
_SIZE = ctypes.sizeof(_Iovec)


def _iov() -> tuple:
    """This thread's (local iovec, remote iovec, address of the local one; the remote one follows)."""
    try:
        return _local.iov
    except AttributeError:
        pair = (_Iovec * 2)()
        _local.iov = (pair[0], pair[1], ctypes.addressof(pair))
        return _local.iov


_declared = False


def allow_peers() -> None:
    """Let other processes of this user read our memory even under Yama ptrace_scope=1."""
    global _declared
    if _declared or not available:
        return
    _declared = True
    try:
        _libc.prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover
        pass


def address(a) -> int:
    """The address of a contiguous numpy array's first byte. ``ctypes.addressof(c_char.from_buffer(a))``
    takes a third of the time of ``a.ctypes.data`` (0.33 against 1.2 us on a 2-core x86 VM), which the
    host-page paths pay several times a call; read-only and empty arrays take the slow way."""
    try:
        return _addressof(_c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


def _copy(call, what: str, pid: int, remote_addr: int, local_addr: int, nbytes: int) -> None:
    loc, rem, at = _iov()
    done = 0
    while done < nbytes:  # the kernel may move fewer bytes than asked: go on from where it stopped
        loc.iov_base, loc.iov_len = local_addr + done, nbytes - done
        rem.iov_base, rem.iov_len = remote_addr + done, nbytes - done
        n = call(pid, at, 1, at + _SIZE, 1, 0)
        if n <= 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what} pid {pid}: {os.strerror(err)}")
        done += n


# A copy whose destination lies 1 to 31 bytes past its source modulo 4 KiB runs 5x (the kernel's copy)
# to 13x (glibc's memmove) slower on an AMD EPYC VM: every load of the next vector aliases the
# store just made (4K aliasing). Two buffers allocated one after the other from the heap sit exactly there
# (the second 16 bytes past a 4 KiB multiple from the first), and so does a peer's buffer of the same
# allocation order: 2-rank reduce_scatter of 4 MiB read its peer's input into its output 4x slower after
# the process had freed larger arrays (1,467 against 371 us). Such a transfer goes in two hops through a
# bounce buffer placed 2 KiB off both ends, in pieces that stay in cache: 256 KiB by cross-memory attach,
# d = 16: 155 -> ~50 us (benchmarks/RESULTS.md).
ALIAS_BYTES = 32
BOUNCE_MIN = 16 << 10  # below it the aliased copy costs less than the second hop
_HOP = 256 << 10
_memmove = ctypes.memmove


def aliased(dst: int, src: int) -> bool:
    """Whether a copy from address src to dst hits 4K aliasing (dst 1..31 bytes past src modulo 4 KiB)."""
    return 0 < ((dst - src) & 4095) < ALIAS_BYTES


def _bounce() -> int:
    """This thread's bounce buffer (its page-aligned address: _HOP + 8 KiB bytes)."""
    try:
        return _local.bounce[1]
    except AttributeError:
        buf = (ctypes.c_char * (_HOP + 3 * 4096))()
        _local.bounce = (buf, (ctypes.addressof(buf) + 4095) & ~4095)
        return _local.bounce[1]


def _transfer(reading: bool, pid: int, remote_addr: int, local_addr: int, nbytes: int) -> None:
    """One cross-memory copy either way; an aliased one of BOUNCE_MIN or more in two hops per piece."""
    call, what = (_readv, "process_vm_readv from") if reading else (_writev, "process_vm_writev to")
    src, dst = (remote_addr, local_addr) if reading else (local_addr, remote_addr)
    if nbytes < BOUNCE_MIN or not aliased(dst, src):
        _copy(call, what, pid, remote_addr, local_addr, nbytes)
        return
    base = _bounce()
    for lo in range(0, nbytes, _HOP):
        n = min(_HOP, nbytes - lo)
        b = base + ((src + lo + 2048) & 4095)  # 2 KiB past the source, and the destination ~2 KiB past it
        if reading:
            _copy(call, what, pid, remote_addr + lo, b, n)
            _memmove(local_addr + lo, b, n)
        else:
            _memmove(b, local_addr + lo, n)
            _copy(call, what, pid, remote_addr + lo, b, n)


def read(pid: int, remote_addr: int, local_addr: int, nbytes: int) -> None:
    """Copy nbytes from (pid, remote_addr) to local_addr; OSError on failure."""
    _transfer(True, pid, remote_addr, local_addr, nbytes)


def write(pid: int, remote_addr: int, local_addr: int, nbytes: int) -> None:
    """Copy nbytes from local_addr to (pid, remote_addr); OSError on failure. Pushing a block the writer
    has in cache into the reader's buffer measured faster than the reader pulling it from the writer's
    cache (2-rank all_gather 1 MiB: 80 -> 61 us)."""
    _transfer(False, pid, remote_addr, local_addr, nbytes)
