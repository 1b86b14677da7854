"""Rendezvous: how the ranks of a job meet (rank 0 starts the store, every rank connects), and a store
barrier.

How a job meets
    Every process learns ``rank``, ``world_size`` and where rank 0 listens (``master_addr``,
    ``master_port``) from :func:`detect_env`. Rank 0 starts a :class:`StoreServer` there; every rank
    (rank 0 too) connects a :class:`StoreClient`. Every connection runs the mutual HMAC handshake of
    :mod:`interlink.transport.wire` with the job secret (:func:`~interlink.launch.secret.job_secret`:
    ``INTERLINK_SECRET``, else a per-user secret on one host, else a refusal), so a process of another job,
    another user or a port scanner is refused without disturbing the job. Each client names its rank, host
    and pid in the handshake, and the store takes each rank once (a second claimant fails the job on every
    rank: :class:`~interlink.errors.RankConflictError`).

The store itself is :mod:`interlink.runtime.store`; the launchers understood are listed in
:mod:`interlink.launch.env`.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import secrets
import socket
import time
from typing import Callable

from ..errors import CommTimeoutError
from ..launch.env import DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT
from ..launch.secret import job_secret
from .store import StoreClient, StoreServer

__all__ = ["rendezvous", "store_barrier"]


def _default_bind(master_addr: str) -> str:
    """Where rank 0 binds: ``master_addr`` itself when it is a loopback address, else every
    interface of its family (as torch's TCPStore does), so a hostname that resolves to another
    local interface still works."""
    try:
        infos = socket.getaddrinfo(master_addr, None, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise OSError(errno.EADDRNOTAVAIL, f"cannot resolve MASTER_ADDR {master_addr!r}: {e}") from e
    ips = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    if all(ip.is_loopback for ip in ips):
        return master_addr
    return "0.0.0.0" if any(ip.version == 4 for ip in ips) else "::"


_GENERATION = 0


def client_name(rank: int, gen: int) -> str:
    """What a rank's store client says of itself in the handshake (authenticated by its MAC): its rank, the
    generation (init) of this process, its pid and host. The store takes each rank once by it."""
    return f"rank {rank} gen {gen} pid {os.getpid()} host {socket.gethostname()}"


def rendezvous(
    rank: int,
    world_size: int,
    master_addr: str = DEFAULT_MASTER_ADDR,
    master_port: int = DEFAULT_MASTER_PORT,
    secret: bytes | None = None,
    timeout: float = 300.0,
    *,
    connect_timeout: float | None = None,
    bind_addr: str | None = None,
    on_conflict: Callable[[str], None] | None = None,
) -> tuple[StoreClient, StoreServer | None]:
    """Meet the other ranks: rank 0 starts the store, every rank connects a client.

    Returns ``(client, server)``; ``server`` is ``None`` except on rank 0, which should close it
    last (``client.close(); server.close(linger=...)``). ``secret`` defaults to
    :func:`~interlink.launch.secret.job_secret` (``INTERLINK_SECRET``, else this user's secret where the
    master is on this host, else :class:`AuthenticationError` saying what to set).
    ``bind_addr`` defaults to ``master_addr`` when that is a loopback address and to all
    interfaces otherwise. With ``world_size == 1`` the store listens on a free loopback port.
    A busy ``master_port`` raises ``OSError(EADDRINUSE)`` naming the port. ``on_conflict`` (rank 0) is
    called with the message when a second process claims a rank that is taken (the runtime aborts the job).
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    global _GENERATION
    _GENERATION += 1  # every init() of this process is a new generation of the job's store
    gen = _GENERATION
    name = client_name(rank, gen)
    if world_size == 1:  # nobody else will connect: do not hold (or collide on) the job's port
        secret = secret if secret is not None else secrets.token_bytes(32)
        server = StoreServer("127.0.0.1", 0, secret)
        try:
            return StoreClient("127.0.0.1", server.port, secret, timeout, 10.0, name=name), server
        except BaseException:
            server.close()
            raise
    if secret is None:
        secret = job_secret(master_addr, int(master_port), world_size, rank=rank)
    server = None
    if rank == 0:
        server = StoreServer(bind_addr or _default_bind(master_addr), int(master_port), secret, generation=gen,
                             world_size=world_size, on_conflict=on_conflict)
    try:
        client = StoreClient(master_addr, server.port if server else int(master_port), secret, timeout,
                             connect_timeout, name=name)
    except BaseException:
        if server is not None:
            server.close()
        raise
    return client, server


def store_barrier(
    client: StoreClient, prefix: str, rank: int, world_size: int, timeout: float | None = None
) -> None:
    """Block until all ``world_size`` ranks have called ``store_barrier`` with this ``prefix``.

    Each use needs a fresh ``prefix`` (e.g. with a sequence number). On timeout raises
    :class:`CommTimeoutError` whose ``ranks`` are the ranks that did not arrive.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    if world_size == 1:
        return
    t = client.timeout if timeout is None else float(timeout)
    start = time.monotonic()
    client.set(f"{prefix}/arrived/{rank}", b"1")
    n = client.add(f"{prefix}/count", 1)
    if n > world_size:
        raise ValueError(
            f"store barrier {prefix!r} counted {n} arrivals for {world_size} ranks: a barrier prefix "
            "was reused (or two ranks share a rank number)"
        )
    done = f"{prefix}/done"
    if n == world_size:
        client.set(done, b"1")
        return
    try:
        client.wait(done, max(t - (time.monotonic() - start), 0.0))
    except CommTimeoutError:
        missing_keys = client.missing([f"{prefix}/arrived/{r}" for r in range(world_size)])
        missing = sorted(int(k.rsplit("/", 1)[1]) for k in missing_keys)
        raise CommTimeoutError(
            f"store barrier {prefix!r} timed out after {t:g}s on rank {rank}: "
            f"{len(missing)} of {world_size} ranks did not arrive: {missing}",
            op="barrier",
            ranks=missing,
        ) from None
