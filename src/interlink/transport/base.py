"""The transport interface: a directed pair of channels to one peer, driven by non-blocking progress.

A transport moves *messages* between two ranks in FIFO order per direction. Every message carries
a small header (the collective's sequence number, a tag, the payload size and a short signature of the
call) so that the receiver can detect mismatched calls instead of corrupting data.

The executor posts operations and calls ``progress`` until they complete; ``progress`` never
blocks. A receive may reduce into its destination as data arrives (``reduce`` callback), which lets the
shared-memory transport reduce straight from the peer's memory with no extra copy.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Optional, Protocol

import numpy as np

HEADER = struct.Struct("<QQqQH86s")  # nbytes, seq, tag, flags, siglen, sig
HEADER_SIZE = 128
SIG_MAX = 86

ReduceFn = Callable[[np.ndarray, np.ndarray], None]  # reduce(dst_bytes_view, src_bytes_view)


@dataclass(frozen=True)
class MsgHeader:
    """A message header as seen in error messages."""

    nbytes: int
    seq: int
    tag: int
    sig: str

    def pack(self) -> bytes:
        return pack_header(self.nbytes, self.seq, self.tag, self.sig.encode()[:SIG_MAX])

    @classmethod
    def unpack_from(cls, buf, offset: int = 0) -> "MsgHeader":
        nbytes, seq, tag, _flags, siglen, sig = HEADER.unpack_from(buf, offset)
        return cls(nbytes, seq, tag, sig[:siglen].decode(errors="replace"))


def pack_header(nbytes: int, seq: int, tag: int, sigb: bytes) -> bytes:
    raw = HEADER.pack(nbytes, seq, tag, 0, len(sigb), sigb)
    return raw + b"\0" * (HEADER_SIZE - len(raw))


def encode_sig(sig: str) -> bytes:
    return sig.encode()[:SIG_MAX]


class Op:
    """One posted send or receive of one message.

    ``data`` is a flat uint8 view of the chunk; the header carries (len(data), seq, tag, sigb), which
    the receiver compares with its own expectation before any byte lands.
    """

    __slots__ = ("kind", "peer", "data", "seq", "tag", "sigb", "reduce", "done", "offset", "started",
                 "got_header", "tmp", "bulk")

    def __init__(self, kind: str, peer: int, data: np.ndarray, seq: int, tag: int, sigb: bytes,
                 reduce: Optional[ReduceFn] = None, bulk: int = 0) -> None:
        self.kind = kind  # "send" | "recv"
        self.peer = peer
        self.data = data
        self.seq = seq
        self.tag = tag
        self.sigb = sigb
        self.reduce = reduce  # receives only: dst = reduce(dst, incoming)
        self.done = False
        self.offset = 0
        self.started = False
        self.got_header = None
        self.tmp = None
        # a send whose receiver stores (not reduces) the data: from this many bytes (0: never) a transport
        # may let the receiver read it in place (one copy) instead of streaming it through a ring (two)
        self.bulk = int(bulk)

    def expected(self) -> MsgHeader:
        return MsgHeader(self.data.size, self.seq, self.tag, self.sigb.decode(errors="replace"))

    def check_header(self, buf, offset: int, peer: int) -> None:
        """Raise HeaderMismatch unless the header at buf[offset:] is the one this receive expects."""
        nbytes, seq, tag, _flags, siglen, sig = HEADER.unpack_from(buf, offset)
        if nbytes != self.data.size or seq != self.seq or tag != self.tag or sig[:siglen] != self.sigb:
            raise HeaderMismatch(peer, self.expected(), MsgHeader.unpack_from(buf, offset))


class HeaderMismatch(Exception):
    """Raised by a transport's progress when the incoming header differs from the expected one."""

    def __init__(self, peer: int, expected: MsgHeader, got: MsgHeader) -> None:
        super().__init__(f"peer {peer}: expected {expected}, got {got}")
        self.peer = peer
        self.expected = expected
        self.got = got


class PeerClosed(Exception):
    def __init__(self, peer: int, detail: str = "") -> None:
        super().__init__(f"peer {peer} closed the connection {detail}".strip())
        self.peer = peer
        self.detail = detail


class Channel(Protocol):
    """Both directions to one peer."""

    name: str
    peer: int

    def progress_send(self, op: Op) -> bool:
        """Move as much of a send as possible without blocking; True when the op is complete
        (its buffer may be reused)."""

    def progress_recv(self, op: Op) -> bool:
        """Move as much of a receive as possible without blocking; True when complete."""

    def wait_fds(self, send: bool, recv: bool) -> list[tuple[int, int]]:
        """(fd, poll events) worth sleeping on while ops are pending, or [] (busy-poll transports)."""

    def peek_header(self) -> Optional[MsgHeader]:
        """The header of the next incoming message once it has arrived, without taking it (a receive
        from any source picks its peer by it); None before. Only while no receive of this channel is
        in progress."""

    def close(self) -> None: ...
