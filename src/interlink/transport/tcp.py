"""TCP transport: non-blocking, authenticated stream sockets between a pair of ranks: a control
connection and one data connection per lane (the runtime's policy decides how many lanes a pair opens;
lane i runs from the dialling rank's NIC i to the peer's NIC i, several streams on one NIC otherwise).

Each message is a 128-byte header followed by the payload. Small messages are sent with their
header in one system call; large ones stream straight from and into the user's memory. A reducing
receive lands in a temporary buffer and is reduced once complete.
"""

from __future__ import annotations

import select
import socket

import numpy as np

from .base import HEADER_SIZE, MsgHeader, Op, PairSetup, PeerClosed, Transport, pack_header

SMALL = 64 * 1024


def tune_socket(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, 4 * 1024 * 1024)
        except OSError:
            pass


class TcpChannel:
    name = "tcp"
    #: the peer's end of the connection (EOF) comes after every byte it sent on it (Engine.heard_to_the_end)
    ends_after_data = True

    def __init__(self, peer: int, sock: socket.socket, local: bool = False, lane: int = 0) -> None:
        self.peer = peer
        self.sock = sock
        self.local = local  # the peer is on this host (INTERLINK_TRANSPORT=tcp between local ranks)
        self.lane = lane  # which of the pair's data connections this is
        self.sent = 0  # payload bytes of the completed sends and receives (what the lane carried)
        self.received = 0
        tune_socket(sock)
        sock.setblocking(False)
        self._hdr = bytearray(HEADER_SIZE)

    def progress_send(self, op: Op) -> bool:
        if op.done:
            return True
        if not op.started:
            head = pack_header(op.data.size, op.seq, op.tag, op.sigb)
            if op.data.size <= SMALL:
                op.tmp = np.frombuffer(head + op.data.tobytes(), dtype=np.uint8)
            else:
                op.tmp = np.frombuffer(head, dtype=np.uint8)
            op.started = True
            op.offset = -op.tmp.size  # negative: still in the prefix
        try:
            while True:
                if op.offset < 0:
                    pre = op.tmp
                    sent = self.sock.send(memoryview(pre)[pre.size + op.offset:])
                    op.offset += sent
                    if op.offset == 0 and pre.size > HEADER_SIZE:
                        op.offset = op.data.size  # payload went with the header
                else:
                    if op.offset >= op.data.size:
                        op.done = True
                        op.tmp = None
                        self.sent += op.data.size
                        return True
                    sent = self.sock.send(memoryview(op.data)[op.offset:])
                    op.offset += sent
                if sent == 0:
                    raise PeerClosed(self.peer)
        except (BlockingIOError, InterruptedError):
            return False
        except (BrokenPipeError, ConnectionResetError) as e:
            raise PeerClosed(self.peer, str(e)) from None

    def peek_header(self) -> "MsgHeader | None":
        try:
            got = self.sock.recv(HEADER_SIZE, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return None
        except ConnectionResetError as e:
            raise PeerClosed(self.peer, str(e)) from None
        if not got:
            raise PeerClosed(self.peer)
        return MsgHeader.unpack_from(got) if len(got) == HEADER_SIZE else None

    def progress_recv(self, op: Op) -> bool:
        if op.done:
            return True
        try:
            if op.got_header is None:
                if not op.started:
                    op.started = True
                    op.offset = 0
                mv = memoryview(self._hdr)
                while op.offset < HEADER_SIZE:
                    n = self.sock.recv_into(mv[op.offset:])
                    if n == 0:
                        raise PeerClosed(self.peer)
                    op.offset += n
                op.check_header(self._hdr, 0, self.peer)
                op.got_header = True
                op.offset = 0
                if op.reduce is not None and op.data.size:
                    op.tmp = np.empty(op.data.size, dtype=np.uint8)
            target = op.tmp if op.tmp is not None else op.data
            mv = memoryview(target)
            while op.offset < target.size:
                n = self.sock.recv_into(mv[op.offset:])
                if n == 0:
                    raise PeerClosed(self.peer)
                op.offset += n
        except (BlockingIOError, InterruptedError):
            return False
        except ConnectionResetError as e:
            raise PeerClosed(self.peer, str(e)) from None
        if op.tmp is not None:
            op.reduce(op.data, op.tmp)  # type: ignore[misc]
            op.tmp = None
        op.done = True
        self.received += op.data.size
        return True

    def wait_fds(self, send: bool, recv: bool) -> list[tuple[int, int]]:
        ev = (select.POLLOUT if send else 0) | (select.POLLIN if recv else 0)
        return [(self.sock.fileno(), ev)] if ev else []

    def end_writes(self) -> None:
        """No more sends: the peer reads what was sent, then EOF (the socket stays open for reading)."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class TcpTransport(Transport):
    """Any pair: a control connection (dead peer, ABORT frames) and a data connection per lane, all TCP."""

    name = "tcp"
    connections = (("ctrl", "tcp"), ("data", "tcp"))
    lane_purpose = "data"

    def can_connect(self, a: dict, b: dict) -> bool:
        return bool(a.get("tcp")) and bool(b.get("tcp"))

    def connect(self, pair: PairSetup) -> "tuple[TcpChannel, socket.socket]":
        data = pair.socks["data"]
        data.settimeout(None)
        return TcpChannel(pair.peer, data, local=pair.local), pair.socks["ctrl"]

    def connect_lane(self, pair: PairSetup, lane: int) -> TcpChannel:
        sock = pair.socks[f"data#{lane}"]
        sock.settimeout(None)
        return TcpChannel(pair.peer, sock, local=pair.local, lane=lane)


TRANSPORT = TcpTransport()
