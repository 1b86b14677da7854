"""Shared-memory transport between ranks of one host.

Each pair of ranks shares one anonymous memory file (memfd) holding two single-producer /
single-consumer rings, one per direction. The file descriptor travels over the pair's Unix socket
(SCM_RIGHTS), so no name ever appears in /dev/shm: nothing can leak, even when a rank is SIGKILLed.

Ring layout (one direction):
    [0:8)      write count (slots published by the producer)
    [64:72)    read count (slots released by the consumer)        -- separate cache lines
    [128 + i*128 ...)   slot i meta: payload length (u64) + message header of the first slot
    [128 + N*128 + i*SLOT ...)  slot i payload

The producer fills a free slot, then publishes it by bumping the write count; the consumer reads the
slot (copy, or reduce straight from shared memory into the destination) and bumps the read count.
Aligned 8-byte counters and x86-64's store ordering make this safe without locks.
"""

from __future__ import annotations

import mmap
import os
import socket
import struct

import numpy as np

from .base import HEADER, Op

CTRL = 128
META = 128
_LEN = struct.Struct("<Q")


def _env_int(name: str, default: int) -> int:
    v = os.environ.get(name)
    return int(v) if v else default


def ring_params() -> tuple[int, int]:
    slot = _env_int("INTERLINK_SHM_SLOT_BYTES", 256 * 1024)
    nslots = _env_int("INTERLINK_SHM_SLOTS", 16)
    slot = max(4096, (slot // 4096) * 4096)
    return slot, max(2, nslots)


class _Ring:
    def __init__(self, mm: mmap.mmap, base: int, slot: int, nslots: int) -> None:
        self.mm = mm
        self.slot = slot
        self.n = nslots
        buf = np.frombuffer(mm, dtype=np.uint8)
        self.wc = np.frombuffer(mm, dtype=np.uint64, count=1, offset=base)
        self.rc = np.frombuffer(mm, dtype=np.uint64, count=1, offset=base + 64)
        self.meta_base = base + CTRL
        data_base = base + CTRL + nslots * META
        self.slots = [buf[data_base + i * slot: data_base + (i + 1) * slot] for i in range(nslots)]

    @staticmethod
    def size(slot: int, nslots: int) -> int:
        return CTRL + nslots * META + nslots * slot


class ShmChannel:
    """Both directions to one peer on the same host."""

    name = "shm"

    def __init__(self, peer: int, mm: mmap.mmap, i_am_low: bool, slot: int, nslots: int) -> None:
        self.peer = peer
        self.mm = mm
        rs = _Ring.size(slot, nslots)
        low_to_high = _Ring(mm, 0, slot, nslots)
        high_to_low = _Ring(mm, rs, slot, nslots)
        self.tx, self.rx = (low_to_high, high_to_low) if i_am_low else (high_to_low, low_to_high)
        self.peer_bell: "Bell | None" = None  # set once the host page exists

    # -- creation: the lower rank makes the memfd and passes it over the Unix socket ------------
    @classmethod
    def create(cls, peer: int, sock: socket.socket, i_am_low: bool) -> "ShmChannel":
        if i_am_low:
            slot, nslots = ring_params()
            size = 2 * _Ring.size(slot, nslots)
            fd = os.memfd_create(f"interlink-{os.getpid()}-{peer}", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, size)
                mm = mmap.mmap(fd, size)
                socket.send_fds(sock, [struct.pack("<QQ", slot, nslots)], [fd])
            finally:
                os.close(fd)
        else:
            msg, fds, _flags, _addr = socket.recv_fds(sock, 16, 1)
            if len(msg) != 16 or len(fds) != 1:
                raise ConnectionError(f"peer {peer} did not send a shared-memory descriptor")
            slot, nslots = struct.unpack("<QQ", msg)
            size = 2 * _Ring.size(slot, nslots)
            try:
                mm = mmap.mmap(fds[0], size)
            finally:
                os.close(fds[0])
        return cls(peer, mm, i_am_low, slot, nslots)

    # -- progress ------------------------------------------------------------------------------
    def progress_send(self, op: Op) -> bool:
        ring = self.tx
        nbytes = op.data.size
        moved = False
        while not op.done:
            w = int(ring.wc[0])
            if w - int(ring.rc[0]) >= ring.n:
                return moved and op.done
            i = w % ring.n
            n = min(ring.slot, nbytes - op.offset)
            meta = ring.meta_base + i * META
            _LEN.pack_into(self.mm, meta, n)
            if not op.started:
                sigb = op.sigb
                HEADER.pack_into(self.mm, meta + 8, nbytes, op.seq, op.tag, 0, len(sigb), sigb)
                op.started = True
            if n:
                ring.slots[i][:n] = op.data[op.offset:op.offset + n]
            ring.wc[0] = w + 1  # publish
            if self.peer_bell is not None:
                self.peer_bell.ring()
            op.offset += n
            moved = True
            if op.offset >= nbytes:
                op.done = True
        return op.done

    def progress_recv(self, op: Op) -> bool:
        ring = self.rx
        nbytes = op.data.size
        while not op.done:
            r = int(ring.rc[0])
            if r == int(ring.wc[0]):
                return False
            i = r % ring.n
            meta = ring.meta_base + i * META
            (n,) = _LEN.unpack_from(self.mm, meta)
            if not op.started:
                op.check_header(self.mm, meta + 8, self.peer)
                op.started = True
            if n:
                src = ring.slots[i][:n]
                dst = op.data[op.offset:op.offset + n]
                if op.reduce is not None:
                    op.reduce(dst, src)
                else:
                    dst[...] = src
            ring.rc[0] = r + 1  # release
            if self.peer_bell is not None:
                self.peer_bell.ring()
            op.offset += n
            if op.offset >= nbytes:
                op.done = True
        return True

    def ready(self, op: Op) -> bool:
        """Could progress move this op now? (data waiting to be read, or a free slot to write)."""
        if op.kind == "send":
            return int(self.tx.wc[0]) - int(self.tx.rc[0]) < self.tx.n
        return int(self.rx.rc[0]) != int(self.rx.wc[0])

    def wait_fds(self, send: bool, recv: bool) -> list[tuple[int, int]]:
        return []

    def close(self) -> None:
        self.tx = self.rx = None  # type: ignore[assignment]
        try:
            self.mm.close()
        except (BufferError, ValueError):
            pass  # views still alive; the mapping goes with the process


assert HEADER.size <= META - 8


# ---- doorbells: how a rank sleeps until a peer on the same host has news for it -------------------

BELL = 64  # bytes per rank on the host page: [0:4) doorbell counter (futex word), [4:8) sleeping flag


class HostPage:
    """One small shared page per host: a doorbell per local rank.

    A rank with nothing to do sets its sleeping flag, re-checks its work, and futex-waits on its doorbell;
    a peer that publishes data to it (or frees ring space it waits for) bumps the doorbell and wakes it
    when the flag is set. The wait has a timeout, so the control plane is still polled regularly.
    """

    def __init__(self, mm: mmap.mmap, nlocal: int) -> None:
        from . import futex

        self.mm = mm
        self.nlocal = nlocal
        self.words = np.frombuffer(mm, dtype=np.uint32, count=nlocal * BELL // 4)
        self.base = futex.address_of(mm) if futex.available else 0

    @classmethod
    def create(cls, nlocal: int) -> tuple["HostPage", int]:
        fd = os.memfd_create("interlink-host", os.MFD_CLOEXEC)
        os.ftruncate(fd, max(4096, nlocal * BELL))
        mm = mmap.mmap(fd, max(4096, nlocal * BELL))
        return cls(mm, nlocal), fd

    @classmethod
    def attach(cls, fd: int, nlocal: int) -> "HostPage":
        mm = mmap.mmap(fd, max(4096, nlocal * BELL))
        return cls(mm, nlocal)

    def bell(self, index: int) -> "Bell":
        return Bell(self, index)


class Bell:
    __slots__ = ("page", "words", "i", "addr")

    def __init__(self, page: HostPage, index: int) -> None:
        self.page = page
        self.words = page.words
        self.i = index * (BELL // 4)
        self.addr = page.base + index * BELL

    # the owner's side
    def snapshot(self) -> int:
        return int(self.words[self.i])

    def set_sleeping(self, on: bool) -> None:
        self.words[self.i + 1] = 1 if on else 0

    def sleep(self, snapshot: int, timeout: float) -> None:
        from . import futex

        if futex.available and self.addr:
            futex.wait(self.addr, snapshot, timeout)
        else:  # pragma: no cover
            import time

            time.sleep(min(timeout, 1e-4))

    # a peer's side
    def ring(self) -> None:
        """Wake the owner if it sleeps (cheap when it does not)."""
        w = self.words
        if w[self.i + 1]:
            w[self.i] = (int(w[self.i]) + 1) & 0xFFFFFFFF
            from . import futex

            if futex.available and self.addr:
                futex.wake(self.addr)
