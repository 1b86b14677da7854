"""The transport interface: a directed pair of channels to one peer, driven by non-blocking progress.

A transport moves *messages* between two ranks in FIFO order per direction. Every message carries
a small header (the collective's sequence number, a tag, the payload size and a short signature of the
call) so that the receiver can detect mismatched calls instead of corrupting data.

The executor posts operations and calls ``progress`` until they complete; ``progress`` never
blocks. A receive may reduce into its destination as data arrives (``reduce`` callback), which lets the
shared-memory transport reduce straight from the peer's memory with no extra copy.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol

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
                 "got_header", "tmp", "bulk", "lane")

    def __init__(self, kind: str, peer: int, data: np.ndarray, seq: int, tag: int, sigb: bytes,
                 reduce: Optional[ReduceFn] = None, bulk: int = 0, lane: int = 0) -> None:
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
        # which of the pair's connections (lanes) carries it: 0 unless the pair has several (the engine's
        # ``lanes``); the messages of one lane are matched in order, each lane independently
        self.lane = int(lane)

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

    name: str  # the transport's name (logs, `interlink bench`'s transport column); never used to choose a path
    peer: int
    local: bool  # the peer runs on this rank's host (shares its memory and cores)

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


# ---- transports: the entries of the transport table (transport/registry.py) ------------------------

@dataclass
class PairSetup:
    """What a transport gets to build the channel of one pair of ranks (Transport.connect)."""

    rank: int  # this rank
    peer: int  # the other rank
    i_am_low: bool  # this rank is the lower of the two (it accepted the connections; the higher one dialled)
    socks: dict[str, socket.socket]  # the pair's authenticated connections, by purpose (Transport.connections)
    me: dict  # what this rank published at init (Transport.can_connect describes the keys)
    them: dict  # what the peer published
    local: bool  # the two ranks run on the same host
    params: Mapping[str, Any] = field(default_factory=dict)  # the runtime's settings for transports
    # (runtime/policy.py transport_params: "shm.slot_bytes", "shm.slots")
    lanes: int = 1  # data connections (lanes) of this pair: socks holds lane_purpose, then
    # f"{lane_purpose}#{i}" for i = 1 .. lanes - 1 (how many is the runtime's policy, policy.pair_lanes)


class Transport:
    """One entry of the transport table: whether it can connect a pair of ranks, and how.

    The mesh (runtime/mesh.py) opens two listeners per rank, TCP and Unix (abstract namespace, same host
    only), and authenticates every connection with the job secret; a transport names the connections a
    pair opens for it (``connections``: (purpose, endpoint) pairs, endpoint "tcp" or "unix"; the higher
    rank dials them in this order) and turns them into a channel and a control socket (``connect``). The
    first transport of the table that ``can_connect`` a pair connects it.
    """

    name: str = ""
    connections: tuple[tuple[str, str], ...] = ()
    # the pair's ranks share the host's HostPage (doorbells, the shared-page fast paths): such a transport
    # connects ranks of one host only, its control socket is a Unix socket (the page's descriptor travels
    # over it) and its channels take the peer's doorbell as ``peer_bell`` and ring it when they publish
    host_page: bool = False
    # the purpose of the connection a pair may open several times, one per lane (TCP: "data"; lane i
    # leaves from the dialling rank's NIC i toward the peer's NIC i), or None: one channel per pair. How
    # many lanes a pair opens is the runtime's policy (runtime/policy.py pair_lanes), never the transport's.
    lane_purpose: Optional[str] = None

    def publish(self) -> Optional[dict]:
        """What this rank tells every other rank at init for this transport (JSON), stored under
        ``info[name]``; None: nothing."""
        return None

    def can_connect(self, a: dict, b: dict) -> bool:
        """Whether this transport can connect the ranks that published ``a`` (the lower rank) and ``b``.
        Keys: ``rank``, ``host`` (host identity: equal for ranks that can share memory), ``tcp`` ([address,
        port]), ``unix`` (abstract socket name), ``transport`` (INTERLINK_TRANSPORT of that rank, lower
        case, '' when unset), ``transports`` (the names in that rank's table, in order) and, per
        transport that published something, ``info[name]``. Both ranks evaluate it on the same two
        dicts, so they choose alike."""
        raise NotImplementedError

    def connect(self, pair: PairSetup) -> "tuple[Channel, socket.socket]":
        """The channel to ``pair.peer`` and the pair's control socket (the engine watches it for a dead
        peer and ABORT frames), from the connections in ``pair.socks``. Called on both ranks once all
        of the pair's connections are there; may talk over them (both sides run it at the same time)."""
        raise NotImplementedError

    def connect_lane(self, pair: PairSetup, lane: int) -> "Channel":
        """The channel of lane ``lane`` (1 .. pair.lanes - 1) to ``pair.peer``, from the connection
        ``pair.socks[f"{lane_purpose}#{lane}"]``; lane 0 is the channel ``connect`` returned. Only for a
        transport with a ``lane_purpose``."""
        raise NotImplementedError(f"transport {self.name} has one channel per pair (no lanes)")

    def __repr__(self) -> str:
        return f"<transport {self.name}>"
