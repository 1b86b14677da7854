"""The transport table: which transport connects a pair of ranks (as NCCL's p2p / shm / net table).

An ordered list of :class:`~.base.Transport` entries. At init every rank publishes what the others need
to choose (host identity, listening addresses, its INTERLINK_TRANSPORT, the names in its table and what
each transport publishes); for each pair, both ranks run :func:`select` on the same two records and get
the same answer: the first transport, in the lower rank's table order, that both ranks have and that
``can_connect`` the pair. A transport a rank asks for by name (INTERLINK_TRANSPORT=NAME) is tried first
for the pairs of that rank, then the table's order goes on (``tcp`` can connect anything, so
INTERLINK_TRANSPORT=tcp means TCP everywhere; ``shm`` across hosts falls back to TCP).

Adding a transport is one module with a :class:`~.base.Transport` and its channel, plus one line: an
entry in ``_TABLE`` below, or ``register(MyTransport(), before="tcp")`` from the program's own code,
before ``init`` (in every rank).
"""

from __future__ import annotations

from typing import Iterable, Optional

from . import shm, tcp
from .base import Transport

ENDPOINTS = ("unix", "tcp")  # the mesh's listeners a transport's connections may use

_TABLE: list[Transport] = [
    shm.TRANSPORT,  # ranks of one host: shared-memory rings, cross-memory attach, the host page
    tcp.TRANSPORT,  # any pair
]


def transports() -> tuple[Transport, ...]:
    """The table, in order."""
    return tuple(_TABLE)


def names() -> tuple[str, ...]:
    return tuple(t.name for t in _TABLE)


def get(name: str) -> Transport:
    for t in _TABLE:
        if t.name == name:
            return t
    raise KeyError(f"no transport {name!r}; the table has {', '.join(names())}")


def register(transport: Transport, *, before: Optional[str] = None) -> Transport:
    """Add a transport to the table, before the one named ``before`` (default: at the end). Its name must
    be new; its connections use the mesh's endpoints (ENDPOINTS). Returns it."""
    name = getattr(transport, "name", "")
    if not name or not isinstance(name, str) or name != name.lower() or "." in name:
        raise ValueError(f"a transport needs a lower-case name without dots, got {name!r}")
    if name in names():
        raise ValueError(f"a transport named {name!r} is already registered")
    purposes = [p for p, _e in transport.connections]
    if not purposes or len(set(purposes)) != len(purposes):
        raise ValueError(f"transport {name!r}: connections must name distinct purposes, got {transport.connections}")
    bad = [e for _p, e in transport.connections if e not in ENDPOINTS]
    if bad:
        raise ValueError(f"transport {name!r}: unknown endpoints {bad} (the mesh listens on {ENDPOINTS})")
    if before is None:
        _TABLE.append(transport)
    else:
        _TABLE.insert(_TABLE.index(get(before)), transport)
    return transport


def unregister(name: str) -> Transport:
    """Take a transport out of the table (tests); returns it."""
    t = get(name)
    _TABLE.remove(t)
    return t


def select(a: dict, b: dict, table: Optional[Iterable[Transport]] = None) -> Transport:
    """The transport for the pair of ranks that published ``a`` and ``b`` (either order; see
    Transport.can_connect for the keys). LookupError when none can connect them."""
    lo, hi = (a, b) if a.get("rank", 0) <= b.get("rank", 0) else (b, a)
    have = {t.name: t for t in (_TABLE if table is None else table)}
    order = [n for n in lo.get("transports", list(have)) if n in have and n in hi.get("transports", list(have))]
    wanted = [n for n in order if n in (lo.get("transport"), hi.get("transport"))]
    for n in wanted + order:
        if have[n].can_connect(lo, hi):
            return have[n]
    raise LookupError(f"no transport can connect ranks {lo.get('rank')} and {hi.get('rank')} "
                      f"(tried {', '.join(order) or 'none'})")
