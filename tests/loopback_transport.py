"""A transport for the tests: TcpChannel's framing over Unix-domain stream sockets, between ranks of one
host that both ask for it (INTERLINK_TEST_LOOPBACK=1). What it takes to add a transport: this module
and one line, ``registry.register(TRANSPORT, before="shm")``, in every rank before ``init``.

It counts the messages its channels move in this process (``LoopbackChannel.sent``/``received``), so a
test can tell that the job really ran over it.
"""

from __future__ import annotations

import os
import socket

from interlink.transport.base import Op, PairSetup, Transport
from interlink.transport.tcp import TcpChannel

ENV = "INTERLINK_TEST_LOOPBACK"


class LoopbackChannel(TcpChannel):
    name = "loopback"
    sent = 0  # messages sent over loopback channels by this process
    received = 0

    def progress_send(self, op: Op) -> bool:
        was = op.done
        done = super().progress_send(op)
        if done and not was:
            LoopbackChannel.sent += 1
        return done

    def progress_recv(self, op: Op) -> bool:
        was = op.done
        done = super().progress_recv(op)
        if done and not was:
            LoopbackChannel.received += 1
        return done


class LoopbackTransport(Transport):
    name = "loopback"
    connections = (("ctrl", "unix"), ("data", "unix"))  # both over the mesh's Unix listener

    def publish(self) -> dict:
        return {"on": os.environ.get(ENV) == "1"}

    def can_connect(self, a: dict, b: dict) -> bool:
        on = all(x.get("info", {}).get(self.name, {}).get("on") for x in (a, b))
        return on and a["host"] == b["host"]

    def connect(self, pair: PairSetup) -> "tuple[LoopbackChannel, socket.socket]":
        data = pair.socks["data"]
        data.settimeout(None)
        return LoopbackChannel(pair.peer, data, local=pair.local), pair.socks["ctrl"]


TRANSPORT = LoopbackTransport()
