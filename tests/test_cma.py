"""Cross-memory attach (transport/cma.py) between two real processes: every byte lands where it should
for transfers whose destination lies just past its source modulo 4 KiB (the aliased case cma.read and
cma.write take through a bounce buffer), on both sides of the bounce's minimum and its piece size."""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

from interlink.transport import cma

pytestmark = pytest.mark.skipif(not cma.available, reason="no cross-memory attach here")

# (size, destination - source modulo 4 KiB): below, at and above BOUNCE_MIN, across pieces of 256 KiB
CASES = [(n, d) for n in (4096, cma.BOUNCE_MIN - 8, cma.BOUNCE_MIN, 300_007, (1 << 20) + 24)
         for d in (0, 8, 16, 31, 32, 4088)]


def _pattern(n: int, salt: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.int64) * 2654435761 + salt) % 251).astype(np.uint8)


def _serve(r_fd: int, w_fd: int, size: int) -> None:
    """The peer: one buffer with a known pattern; after every transfer, report what its buffer holds."""
    mm = mmap.mmap(-1, size)
    buf = np.frombuffer(mm, np.uint8)
    buf[:] = _pattern(size, 7)
    os.write(w_fd, cma.address(buf).to_bytes(8, "little"))
    while True:
        cmd = os.read(r_fd, 24)
        if not cmd or cmd[:1] == b"q":
            break
        lo, n = int.from_bytes(cmd[8:16], "little"), int.from_bytes(cmd[16:24], "little")
        if cmd[:1] == b"c":  # check: send back the bytes [lo, lo + n)
            data = buf[lo:lo + n].tobytes()
            os.write(w_fd, len(data).to_bytes(8, "little"))
            view = memoryview(data)
            while view:
                k = os.write(w_fd, view[:1 << 16])
                view = view[k:]
        elif cmd[:1] == b"r":  # reset the pattern
            buf[:] = _pattern(size, 7)
            os.write(w_fd, b"k")


def _recv_exact(fd: int, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def test_reads_and_writes_land_exactly_whatever_the_alignment() -> None:
    size = (2 << 20) + 3 * 4096
    from_parent, to_child = os.pipe()
    from_child, to_parent = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the peer process
        try:
            cma.allow_peers()
            os.close(to_child)
            os.close(from_child)
            _serve(from_parent, to_parent, size)
        finally:
            os._exit(0)
    os.close(from_parent)
    os.close(to_parent)
    try:
        remote = int.from_bytes(_recv_exact(from_child, 8), "little")
        mm = mmap.mmap(-1, size + 8192)
        local = np.frombuffer(mm, np.uint8)
        base = cma.address(local)
        want_remote = _pattern(size, 7)
        fails = []
        for n, d in CASES:
            so = 4096 + 64  # the remote source (or destination) offset
            lo_local = (so + d) % 4096 + 4096  # the local side d bytes past it, modulo 4 KiB
            # read: remote -> local, the destination d past the source
            local[:] = 0
            try:
                cma.read(pid, remote + so, base + lo_local, n)
            except OSError as e:
                pytest.skip(f"cross-memory attach refused here: {e}")
            if not np.array_equal(local[lo_local:lo_local + n], want_remote[so:so + n]):
                fails.append(f"read n={n} d={d}")
            if local[:lo_local].any() or local[lo_local + n:].any():
                fails.append(f"read n={n} d={d} wrote outside its destination")
            # write: local -> remote, the remote destination d past the local source
            src = _pattern(size + 8192, n + d)
            local[:] = src
            ls = (so - d) % 4096 + 4096
            cma.write(pid, remote + so, base + ls, n)
            os.write(to_child, b"c" + bytes(7) + (so - 64).to_bytes(8, "little") + (n + 128).to_bytes(8, "little"))
            got = np.frombuffer(_recv_exact(from_child, int.from_bytes(_recv_exact(from_child, 8), "little")), np.uint8)
            want = want_remote[so - 64:so + n + 64].copy()
            want[64:64 + n] = src[ls:ls + n]
            if not np.array_equal(got, want):
                fails.append(f"write n={n} d={d}")
            os.write(to_child, b"r" + bytes(23))
            _recv_exact(from_child, 1)
        assert not fails, fails
        assert cma.aliased(16, 0) and cma.aliased(31, 0) and not cma.aliased(32, 0) and not cma.aliased(0, 16)
    finally:
        os.write(to_child, b"q" + bytes(23))
        os.waitpid(pid, 0)
