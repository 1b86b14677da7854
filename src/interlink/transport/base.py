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
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

import numpy as np

HEADER = struct.Struct("<QQqQH86s")  # nbytes, seq, tag, flags, siglen, sig
HEADER_SIZE = 128
SIG_MAX = 86

ReduceFn = Callable[[np.ndarray, np.ndarray], None]  # reduce(dst_bytes_view, src_bytes_view)


@dataclass(frozen=True)
class MsgHeader:
    nbytes: int
    seq: int
    tag: int
    sig: str

    def pack(self) -> bytes:
        s = self.sig.encode()[:SIG_MAX]
        raw = HEADER.pack(self.nbytes, self.seq, self.tag, 0, len(s), s)
        return raw + b"\0" * (HEADER_SIZE - len(raw))

    def pack_into(self, buf, offset: int) -> None:
        s = self.sig.encode()[:SIG_MAX]
        HEADER.pack_into(buf, offset, self.nbytes, self.seq, self.tag, 0, len(s), s)

    @classmethod
    def unpack_from(cls, buf, offset: int = 0) -> "MsgHeader":
        nbytes, seq, tag, _flags, siglen, sig = HEADER.unpack_from(buf, offset)
        return cls(nbytes, seq, tag, sig[:siglen].decode(errors="replace"))

    def matches(self, other: "MsgHeader") -> bool:
        return (self.nbytes, self.seq, self.tag, self.sig[:SIG_MAX]) == (
            other.nbytes, other.seq, other.tag, other.sig[:SIG_MAX])


@dataclass(eq=False)
class Op:
    """One posted send or receive. ``data`` is a flat uint8 view of the user's chunk."""

    kind: str  # "send" | "recv"
    peer: int
    data: np.ndarray
    header: MsgHeader
    reduce: Optional[ReduceFn] = None  # receives only: dst = reduce(dst, incoming)
    itemsize: int = 1
    done: bool = False
    # transport progress state
    offset: int = 0
    started: bool = False
    got_header: Optional[MsgHeader] = None
    tmp: Optional[np.ndarray] = field(default=None, repr=False)


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

    def close(self) -> None: ...
