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

from .base import HEADER, MsgHeader, Op, PairSetup, Transport
from . import futex as _futex

CTRL = 128
META = 128
ACKS = 96  # offset in a ring's control block: large (CMA) messages the consumer has finished reading
FLAGS = 8 + 24  # offset of the header's flags word inside a slot's meta
FLAG_CMA = 1
_LEN = struct.Struct("<Q")
_DESC = struct.Struct("<QQ")  # pid, address of a CMA message
CMA_PIECE = 1 << 20  # reducing CMA receives read and reduce this much at a time (stays in cache)


# ring geometry when the runtime passes none (runtime/policy.py ring_params is the setting)
SLOT_BYTES = 256 * 1024
SLOTS = 16


class _Ring:
    def __init__(self, mm: mmap.mmap, base: int, slot: int, nslots: int) -> None:
        self.mm = mm
        self.slot = slot
        self.n = nslots
        buf = np.frombuffer(mm, dtype=np.uint8)
        self.wc = np.frombuffer(mm, dtype=np.uint64, count=1, offset=base)
        self.rc = np.frombuffer(mm, dtype=np.uint64, count=1, offset=base + 64)
        self.acks = np.frombuffer(mm, dtype=np.uint64, count=1, offset=base + ACKS)
        self.meta_base = base + CTRL
        data_base = base + CTRL + nslots * META
        self.slots = [buf[data_base + i * slot: data_base + (i + 1) * slot] for i in range(nslots)]

    @staticmethod
    def size(slot: int, nslots: int) -> int:
        return CTRL + nslots * META + nslots * slot


class ShmChannel:
    """Both directions to one peer on the same host."""

    name = "shm"
    local = True

    def __init__(self, peer: int, mm: mmap.mmap, i_am_low: bool, slot: int, nslots: int) -> None:
        self.peer = peer
        self.mm = mm
        rs = _Ring.size(slot, nslots)
        low_to_high = _Ring(mm, 0, slot, nslots)
        high_to_low = _Ring(mm, rs, slot, nslots)
        self.tx, self.rx = (low_to_high, high_to_low) if i_am_low else (high_to_low, low_to_high)
        self.peer_bell: "Bell | None" = None  # set once the host page exists
        self.cma_ok = False  # the peer's memory can be read by CMA (probed at connect)
        self.cma_sent = 0
        self.peer_pid = 0
        self._piece: "np.ndarray | None" = None

    # -- creation: the lower rank makes the memfd and passes it over the Unix socket ------------
    @classmethod
    def create(cls, peer: int, sock: socket.socket, i_am_low: bool, slot: int = SLOT_BYTES,
               nslots: int = SLOTS) -> "ShmChannel":
        """The lower rank makes the rings (slot bytes x nslots per direction; the higher one takes the
        geometry it is sent) and both probe cross-memory attach."""
        if i_am_low:
            slot, nslots = max(4096, (int(slot) // 4096) * 4096), max(2, int(nslots))
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
        ch = cls(peer, mm, i_am_low, slot, nslots)
        ch._probe_cma(sock)
        return ch

    def _probe_cma(self, sock: socket.socket) -> None:
        """Both sides try to read a magic word from each other; CMA is used only if both can."""
        from . import cma

        probe = np.frombuffer(b"ILNKCMA!", dtype=np.uint8).copy()
        mine = 0
        if cma.available:
            cma.allow_peers()
        sock.sendall(_DESC.pack(os.getpid(), probe.ctypes.data if cma.available else 0))
        pid, addr = _DESC.unpack(_recv_exact(sock, _DESC.size))
        if cma.available and addr:
            got = np.zeros(8, dtype=np.uint8)
            try:
                cma.read(pid, addr, got.ctypes.data, 8)
                mine = int(got.tobytes() == b"ILNKCMA!")
            except OSError:
                mine = 0
        sock.sendall(bytes([mine]))
        theirs = _recv_exact(sock, 1)[0]
        del probe
        if mine and theirs:
            self.cma_ok = True
            self.peer_pid = pid

    # -- progress ------------------------------------------------------------------------------
    def progress_send(self, op: Op) -> bool:
        ring = self.tx
        nbytes = op.data.size
        if op.bulk and self.cma_ok and nbytes >= op.bulk:
            return self._send_cma(op)
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

    def _send_cma(self, op: Op) -> bool:
        """Large message: publish (pid, address) in one slot, complete when the peer has read it."""
        ring = self.tx
        if not op.started:
            w = int(ring.wc[0])
            if w - int(ring.rc[0]) >= ring.n:
                return False
            i = w % ring.n
            meta = ring.meta_base + i * META
            _LEN.pack_into(self.mm, meta, _DESC.size)
            sigb = op.sigb
            HEADER.pack_into(self.mm, meta + 8, op.data.size, op.seq, op.tag, FLAG_CMA, len(sigb), sigb)
            ring.slots[i][:_DESC.size] = np.frombuffer(_DESC.pack(os.getpid(), op.data.ctypes.data), dtype=np.uint8)
            self.cma_sent += 1
            op.tmp = self.cma_sent  # the ack count that means "read"
            op.started = True
            op.offset = 1
            ring.wc[0] = w + 1  # publish
            if self.peer_bell is not None:
                self.peer_bell.ring()
        if int(ring.acks[0]) >= op.tmp:
            op.done = True
            op.offset = op.data.size
            return True
        return False

    def _recv_cma(self, op: Op, slot: int) -> None:
        from . import cma

        ring = self.rx
        pid, addr = _DESC.unpack_from(ring.slots[slot][:_DESC.size].tobytes())
        nbytes = op.data.size
        try:
            if op.reduce is None:
                cma.read(pid, addr, op.data.ctypes.data, nbytes)
            else:
                piece = self._piece
                if piece is None or piece.size < min(CMA_PIECE, nbytes):
                    piece = self._piece = np.empty(min(CMA_PIECE, max(nbytes, 1)), dtype=np.uint8)
                base = piece.ctypes.data
                for off in range(0, nbytes, CMA_PIECE):
                    n = min(CMA_PIECE, nbytes - off)
                    cma.read(pid, addr + off, base, n)
                    op.reduce(op.data[off:off + n], piece[:n])
        except OSError as e:
            from .base import PeerClosed

            raise PeerClosed(self.peer, f"(reading its memory failed: {e})") from None

    def peek_header(self) -> "MsgHeader | None":
        ring = self.rx
        r = int(ring.rc[0])
        if r == int(ring.wc[0]):
            return None
        return MsgHeader.unpack_from(self.mm, ring.meta_base + (r % ring.n) * META + 8)

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
                if _LEN.unpack_from(self.mm, meta + FLAGS)[0] & FLAG_CMA:
                    self._recv_cma(op, i)
                    ring.rc[0] = r + 1  # release the descriptor slot
                    ring.acks[0] = int(ring.acks[0]) + 1  # and tell the sender its buffer is free
                    if self.peer_bell is not None:
                        self.peer_bell.ring()
                    op.offset = nbytes
                    op.done = True
                    return True
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
            if op.started and op.tmp is not None:  # a CMA send waits for the reader's ack
                return int(self.tx.acks[0]) >= op.tmp
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


class ShmTransport(Transport):
    """Ranks of one host: one Unix socket per pair (the control connection; the rings' memfd travels over
    it), two shared-memory rings, cross-memory attach for large stored messages, the host page."""

    name = "shm"
    connections = (("ctrl", "unix"),)
    host_page = True

    def can_connect(self, a: dict, b: dict) -> bool:
        return a.get("host") is not None and a.get("host") == b.get("host") and bool(a.get("unix")) \
            and bool(b.get("unix"))

    def connect(self, pair: PairSetup) -> "tuple[ShmChannel, socket.socket]":
        sock = pair.socks["ctrl"]
        ch = ShmChannel.create(pair.peer, sock, pair.i_am_low, int(pair.params.get("shm.slot_bytes", SLOT_BYTES)),
                               int(pair.params.get("shm.slots", SLOTS)))
        return ch, sock


TRANSPORT = ShmTransport()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed the connection during shared-memory setup")
        buf += chunk
    return buf


# ---- the host page: doorbells (how a rank sleeps until a peer on the same host has news for it) and
# the slots of the shared-page paths. Code outside this module addresses it through HostPage's methods.

BELL = 128  # bytes per rank on the host page: [0:4) doorbell counter (futex word), [8:16) done word,
# [16:24) agreement word, [64:68) sleeping flag (see HostPage). The sleeping flag has a cache line of its
# own: a peer reads it after every publish and done (to ring only a sleeper), and in the done word's line,
# which its owner writes every call, each of those reads was a miss to the owner's core
SLEEP_OFF = 64  # byte offset of the sleeping flag in a rank's bell block


#: entries of the host page's choice table after the doorbells: [key, choice + 1] u64 pairs, where the host's
#: first rank publishes which path a call shape measured faster (runtime.fastpath.FastPath.pick)
TUNE_ENTRIES = 64
FAST_SLOT_HDR = 192  # bytes at the start of each slot for its user's header (runtime.fastpath lays out its words)
#: call headers a rank keeps on the host page, one per call in turn (call f uses entry f % HEADERS): a call's
#: header (published call number, group seq, signature) stays readable until HEADERS calls later, so a rank may
#: run up to HEADERS - 1 calls ahead of a reader of its header (a broadcast's root: runtime/oneshot.py)
HEADERS = 16
_PAGE_HELLO = struct.Struct("<QQ")  # nlocal, slot payload bytes: sent with the page's descriptor


def _map(fd: int, size: int, populate: bool) -> mmap.mmap:
    """The host page mapped; with ``populate``, every page present from the start (MAP_POPULATE, where the
    platform has it), so that no call pays for the first touch of a slot: successive calls of one shape
    rotate through up to 16 places of each slot, and each place's first use faulted its pages in, in every
    rank (2 ranks, all_reduce of 16 KiB: calls 2-32 took 2.1x the steady state's time; benchmarks/RESULTS.md). The cost: the page's memory is committed at init (the runtime's policy decides,
    policy.host_page_populate)."""
    flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
    return mmap.mmap(fd, size, flags=flags)


class HostPage:
    """One small shared page per host: a doorbell per local rank, and two small-message slots per rank.

    Doorbells: a rank with nothing to do sets its sleeping flag, re-checks its work, and futex-waits
    on its doorbell; a peer that publishes data to it (or frees ring space it waits for) bumps the
    doorbell and wakes it when the flag is set. The wait has a timeout, so the control plane is still
    polled regularly. Next to each rank's doorbell: its *done* word (the last shared-page call it has
    finished reading: ``done_word``, ``done``) and its *agreement* word (``agree_word``: flags the local
    ranks AND together once, at init). After the doorbells: the choice table (``tune_word``), where the
    host's first rank publishes which of two paths it measured faster for a call shape.

    Call headers: HEADERS per rank after the choice table (``header_offset``/``header_word``): call f's
    header is entry f % HEADERS of its rank, FAST_SLOT_HDR bytes whose words its user lays out.

    Slots (the small-message fast path): two per rank (parity 0 and 1), then one more pair, index nlocal:
    the result of an all_reduce that one rank reduces for everyone (oversubscribed hosts). Each slot is
    a FAST_SLOT_HDR-byte header whose words its user lays out (runtime.fastpath), then up to ``fast_max``
    bytes of payload. A strided view over the same parity of every rank gives the ranks' contributions as
    one 2-D array (``stacked``). Where each of these is: ``slot_offset``/``slot_word``, ``done_word``,
    ``agree_word``, ``sleeping_word``; ``words64``/``words32`` view the whole page as u64/u32 words.
    """

    def __init__(self, mm: mmap.mmap, nlocal: int, fast_max: int) -> None:
        self.mm = mm
        self.nlocal = nlocal
        self.words = np.frombuffer(mm, dtype=np.uint32, count=nlocal * BELL // 4)
        self.base = _futex.address_of(mm) if _futex.available else 0
        self.fast_max = fast_max
        self.slot_stride = self._slot_stride(fast_max)
        self.data_base = self._data_base(nlocal)
        self.headers_base = self._headers_base(nlocal)
        # done[i]: the last fast-path call rank i has finished reading (bytes 8..16 of its bell block)
        self.done = np.ndarray((nlocal,), dtype=np.uint64, buffer=mm, offset=8, strides=(BELL,))

    @staticmethod
    def _headers_base(nlocal: int) -> int:
        """Where the call headers begin: after the doorbells and the choice table, line-aligned."""
        return ((nlocal * BELL + 16 * TUNE_ENTRIES + 63) // 64) * 64

    @classmethod
    def _data_base(cls, nlocal: int) -> int:
        """Where the slots begin: after the call headers, page-aligned."""
        return ((cls._headers_base(nlocal) + nlocal * HEADERS * FAST_SLOT_HDR + 4095) // 4096) * 4096

    @staticmethod
    def _slot_stride(fast_max: int) -> int:
        """Bytes from one slot to the next: its header, then the payload in whole lines."""
        return FAST_SLOT_HDR + ((fast_max + 63) // 64) * 64

    @classmethod
    def size(cls, nlocal: int, fast_max: int) -> int:
        return cls._data_base(nlocal) + 2 * (nlocal + 1) * cls._slot_stride(fast_max)

    @classmethod
    def create(cls, nlocal: int, fast_max: int, populate: bool = True) -> tuple["HostPage", int]:
        """A new page for nlocal ranks whose slots carry up to fast_max bytes (0: doorbells only), and
        its descriptor (the caller closes it)."""
        size = cls.size(nlocal, fast_max)
        fd = os.memfd_create("interlink-host", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        return cls(_map(fd, size, populate), nlocal, fast_max), fd

    @classmethod
    def attach(cls, fd: int, nlocal: int, fast_max: int, populate: bool = True) -> "HostPage":
        return cls(_map(fd, cls.size(nlocal, fast_max), populate), nlocal, fast_max)

    @classmethod
    def share(cls, nlocal: int, fast_max: int, socks: "list[socket.socket]", populate: bool = True) -> "HostPage":
        """Create the page (the host's lowest rank) and send it over each Unix socket in socks."""
        page, fd = cls.create(nlocal, fast_max, populate)
        try:
            for sock in socks:
                socket.send_fds(sock, [_PAGE_HELLO.pack(nlocal, fast_max)], [fd])
        finally:
            os.close(fd)
        return page

    @classmethod
    def receive(cls, sock: socket.socket, timeout: float, populate: bool = True) -> "HostPage":
        """The page a peer shares over the Unix socket sock; ConnectionError when it does not arrive."""
        sock.settimeout(timeout)
        try:
            msg, fds, _flags, _addr = socket.recv_fds(sock, _PAGE_HELLO.size, 1)
        finally:
            sock.settimeout(None)
        if len(msg) != _PAGE_HELLO.size or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise ConnectionError("the host page did not arrive")
        try:
            return cls.attach(fds[0], *_PAGE_HELLO.unpack(msg), populate)
        finally:
            os.close(fds[0])

    def bell(self, index: int) -> "Bell":
        return Bell(self, index)

    # ---- where things are ----------------------------------------------------------------------
    def words64(self) -> memoryview:
        """The whole page as u64 words (what the *_word indices below index)."""
        return memoryview(self.mm).cast("Q")

    def words32(self) -> memoryview:
        """The whole page as u32 words (what ``sleeping_word`` indexes)."""
        return memoryview(self.mm).cast("I")

    def slot_offset(self, index: int, parity: int) -> int:
        """Byte offset of slot (index, parity)'s header; index nlocal: the shared result slot. Its payload
        follows FAST_SLOT_HDR bytes later."""
        return self.data_base + (2 * index + parity) * self.slot_stride

    def slot_word(self, index: int, parity: int) -> int:
        """u64 word index of slot (index, parity)'s header."""
        return self.slot_offset(index, parity) // 8

    def header_offset(self, index: int, call: int) -> int:
        """Byte offset of local rank index's header of call ``call`` (entry call % HEADERS)."""
        return self.headers_base + (index * HEADERS + call % HEADERS) * FAST_SLOT_HDR

    def header_word(self, index: int, call: int) -> int:
        """u64 word index of local rank index's header of call ``call``."""
        return self.header_offset(index, call) // 8

    def header(self, index: int, call: int, words: int = 5) -> np.ndarray:
        """The first ``words`` u64 words of local rank index's header of call ``call``."""
        return np.frombuffer(self.mm, dtype=np.uint64, count=words, offset=self.header_offset(index, call))

    def tune_word(self, entry: int) -> int:
        """u64 word index of the choice table's entry ``entry`` (its key; the choice + 1 follows)."""
        return self.nlocal * BELL // 8 + 2 * (entry % TUNE_ENTRIES)

    def done_word(self, index: int) -> int:
        """u64 word index of local rank index's done word (``done[index]``)."""
        return index * BELL // 8 + 1

    def agree_word(self, index: int) -> int:
        """u64 word index of local rank index's agreement word (zero until it writes it)."""
        return index * BELL // 8 + 2

    def sleeping_word(self, index: int) -> int:
        """u32 word index of local rank index's sleeping flag (non-zero: ring its bell to wake it)."""
        return (index * BELL + SLEEP_OFF) // 4

    def slot_header(self, index: int, parity: int, words: int = 5) -> np.ndarray:
        """The first ``words`` u64 words of slot (index, parity)'s header."""
        return np.frombuffer(self.mm, dtype=np.uint64, count=words, offset=self.slot_offset(index, parity))

    def result(self, parity: int, dtype: np.dtype, count: int, at: int = 0) -> np.ndarray:
        """The shared result slot of this parity (after the ranks' slots) as count elements, ``at`` bytes
        into its payload."""
        self._fits(dtype, count, at)
        off = self.slot_offset(self.nlocal, parity) + FAST_SLOT_HDR + at
        return np.ndarray((count,), dtype=dtype, buffer=self.mm, offset=off)

    def stacked(self, parity: int, dtype: np.dtype, count: int, at: int = 0) -> np.ndarray:
        """[nlocal, count] view of every rank's payload of this parity, ``at`` bytes into each payload."""
        self._fits(dtype, count, at)
        off = self.slot_offset(0, parity) + FAST_SLOT_HDR + at
        return np.ndarray((self.nlocal, count), dtype=dtype, buffer=self.mm, offset=off,
                          strides=(2 * self.slot_stride, dtype.itemsize))

    def _fits(self, dtype: np.dtype, count: int, at: int) -> None:
        if at < 0 or at + count * np.dtype(dtype).itemsize > max(self.fast_max, 0):
            raise ValueError(f"{count} x {np.dtype(dtype)} at byte {at} overruns a {self.fast_max}-byte slot")


class Bell:
    __slots__ = ("page", "words", "i", "flag", "addr", "index", "members")

    def __init__(self, page: HostPage, index: int) -> None:
        self.page = page
        self.index = index
        self.members: list[int] = []
        self.words = page.words
        self.i = index * (BELL // 4)
        self.flag = page.sleeping_word(index)
        self.addr = page.base + index * BELL

    # the owner's side
    def snapshot(self) -> int:
        return int(self.words[self.i])

    def set_sleeping(self, on: bool) -> None:
        self.words[self.flag] = 1 if on else 0
        if on:  # the flag visible before the sleeper loads what it waits for (futex.fence)
            _futex.fence()

    def sleep(self, snapshot: int, timeout: float) -> None:
        if _futex.available and self.addr:
            _futex.wait(self.addr, snapshot, timeout)
        else:  # pragma: no cover
            import time

            time.sleep(min(timeout, 1e-4))

    # a peer's side
    def ring(self) -> None:
        """Wake the owner if it sleeps (cheap when it does not). What the caller published is visible before the
        owner's sleeping flag is read (futex.fence)."""
        _futex.fence()
        w = self.words
        if w[self.flag]:
            w[self.i] = (int(w[self.i]) + 1) & 0xFFFFFFFF
            if _futex.available and self.addr:
                _futex.wake(self.addr)
