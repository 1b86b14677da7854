"""Typed errors that say what failed, where (op, group, sequence number) and who (which ranks).

One base class, :class:`InterlinkError`; argument errors are plain ``ValueError``/``TypeError``
subclasses so that code written for torch.distributed catches them as usual.
"""

from __future__ import annotations

from typing import Iterable


class InterlinkError(RuntimeError):
    """Base of every runtime error interlink raises (bad arguments raise ValueError/TypeError)."""

    def __init__(
        self,
        message: str,
        *,
        op: str | None = None,
        group: str | None = None,
        seq: int | None = None,
        ranks: Iterable[int] | None = None,
    ) -> None:
        self.op = op
        self.group = group
        self.seq = seq
        self.ranks = tuple(ranks) if ranks is not None else ()
        where = []
        if op is not None:
            where.append(f"op={op}")
        if group is not None:
            where.append(f"group={group}")
        if seq is not None:
            where.append(f"seq={seq}")
        if self.ranks:
            where.append(f"ranks={list(self.ranks)}")
        self.message = message
        super().__init__(f"{message} [{', '.join(where)}]" if where else message)


class ScheduleError(InterlinkError):
    """A Schedule is malformed (unmatched send/recv, chunk out of bounds, overlapping receives)."""


class VerificationError(InterlinkError):
    """A Schedule ran but produced a wrong result (missing or double-counted contributions)."""


class CommTimeoutError(InterlinkError, TimeoutError):
    """A peer did not arrive in time."""


class PeerLostError(InterlinkError, ConnectionError):
    """A peer process died or closed its connection."""


class CollectiveMismatchError(InterlinkError):
    """Ranks called different collectives (op, dtype, count, root or order differ)."""


class AuthenticationError(InterlinkError):
    """A connection failed to prove it belongs to the job."""


class RankConflictError(AuthenticationError):
    """Two processes claimed the same rank of a job: the job cannot tell which is real, so it fails on every
    rank (and the second claimant), naming the rank, the host and pid of each claimant."""


class ProtocolError(InterlinkError):
    """A peer sent a malformed or oversized frame."""


class UnsupportedError(InterlinkError, NotImplementedError):
    """A feature is not available here (missing optional dependency, no GPU, ...)."""
