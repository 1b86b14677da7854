"""Collective algorithms as data: the Schedule IR, one module per family, a registry and the
reference executor (numeric and symbolic)."""

from .reference import check_symbolic, expected, run_numeric, run_symbolic, verify_schedule
from .registry import algorithms_for, entries, get_entry, get_schedule, register
from .schedule import (
    COLLECTIVES,
    Builder,
    Chunk,
    Copy,
    Get,
    Recv,
    Reduce,
    Round,
    Schedule,
    Send,
    buffer_sizes,
    busbw_factor,
    one_sided,
    split,
    two_sided,
)

__all__ = [
    "COLLECTIVES", "Builder", "Chunk", "Copy", "Get", "Recv", "Reduce", "Round", "Schedule", "Send",
    "buffer_sizes", "busbw_factor", "one_sided", "two_sided", "split", "algorithms_for", "entries", "get_entry", "get_schedule",
    "register", "check_symbolic", "expected", "run_numeric", "run_symbolic", "verify_schedule",
]
