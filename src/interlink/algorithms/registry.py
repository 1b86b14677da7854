"""Registry of (collective, algorithm) -> builder, and a cached lookup.

A builder is a pure function ``builder(nranks, count, root=0, **params) -> Schedule``.
Each algorithm family module registers its builders with :func:`register` at import time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from .schedule import COLLECTIVES, Schedule

Builder = Callable[..., Schedule]


@dataclass(frozen=True)
class Entry:
    collective: str
    algorithm: str
    builder: Builder
    summary: str  # one line: rounds and bytes on the wire
    params: tuple[str, ...] = ()  # extra keyword parameters the builder accepts (e.g. local_size)


_REGISTRY: dict[tuple[str, str], Entry] = {}
#: former names of algorithms -> their names (accepted wherever an algorithm is named: INTERLINK_ALGO, algorithm=)
_ALIASES: dict[str, str] = {}


def alias(former: str, name: str) -> None:
    """Accept ``former`` wherever ``name`` is named (a renamed algorithm keeps its old name working)."""
    _ALIASES[former] = name


def canonical(algorithm: str) -> str:
    """An algorithm's name from its name or a former one (algorithms/hostpath.py: ``fastd`` -> ``peer_buffers``)."""
    _load()
    return _ALIASES.get(algorithm, algorithm)


def register(collective: str, algorithm: str, summary: str = "", params: tuple[str, ...] = ()) -> Callable[[Builder], Builder]:
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}")

    def deco(fn: Builder) -> Builder:
        key = (collective, algorithm)
        if key in _REGISTRY and _REGISTRY[key].builder is not fn:
            raise ValueError(f"{collective}/{algorithm} registered twice")
        _REGISTRY[key] = Entry(collective, algorithm, fn, summary or _first_sentence(fn.__doc__ or ""), params)
        return fn

    return deco


def _first_sentence(doc: str) -> str:
    """A docstring's first paragraph as one line, cut after its first sentence where it is longer than
    200 characters (never inside a sentence, as the first line of a wrapped paragraph would be)."""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    if len(para) <= 200:
        return para
    cut = para.find(". ")
    return para[:cut + 1] if cut > 0 else para


_LOADED = [False]


def _load() -> None:
    # import the family modules for their registrations (once)
    if _LOADED[0]:
        return
    _LOADED[0] = True
    from . import barrier, bruck, direct, hierarchical, hostpage, pairwise, recursive, ring, switch, trees  # noqa: F401
    from .hostpath import ALIASES

    for former, name in ALIASES.items():
        alias(former, name)


_SORTED: list = [None, []]  # (registry size when sorted, entries)


def entries() -> list[Entry]:
    _load()
    if _SORTED[0] != len(_REGISTRY):
        _SORTED[1] = sorted(_REGISTRY.values(), key=lambda e: (COLLECTIVES.index(e.collective), e.algorithm))
        _SORTED[0] = len(_REGISTRY)
    return _SORTED[1]


def algorithms_for(collective: str) -> list[str]:
    return [e.algorithm for e in entries() if e.collective == collective]


def get_entry(collective: str, algorithm: str) -> Entry:
    _load()
    try:
        return _REGISTRY[(collective, _ALIASES.get(algorithm, algorithm))]
    except KeyError:
        if collective not in COLLECTIVES:
            raise ValueError(f"unknown collective {collective!r}; expected one of {COLLECTIVES}") from None
        raise ValueError(
            f"no algorithm {algorithm!r} for {collective}; available: {algorithms_for(collective)}"
        ) from None


@functools.lru_cache(maxsize=512)
def _cached(collective: str, algorithm: str, nranks: int, count: int, root: int, params: tuple) -> Schedule:
    entry = get_entry(collective, algorithm)
    return entry.builder(nranks, count, root=root, **dict(params))


def get_schedule(collective: str, algorithm: str, nranks: int, count: int, root: int = 0, **params) -> Schedule:
    """The Schedule for these arguments (cached: Schedules are immutable)."""
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if not 0 <= root < nranks:
        raise ValueError(f"root {root} out of range for nranks={nranks}")
    return _cached(collective, algorithm, nranks, count, root, tuple(sorted(params.items())))
