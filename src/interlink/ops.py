"""Reduce operations and dtype tables: which (op, dtype) pairs are valid and how to apply them.

Reductions are numpy ufuncs applied with ``out=`` so that no temporary is made. ``AVG`` is carried
through the algorithms as ``SUM`` and finished by :func:`finish_avg` (floats divide; integers divide
truncating toward zero, like C and NCCL).
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np


class ReduceOp(enum.Enum):
    SUM = "sum"
    PRODUCT = "prod"
    MIN = "min"
    MAX = "max"
    AVG = "avg"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"

    # members are singletons compared by identity: hash them by identity too, in C (Enum's own
    # __hash__ is Python code, 150 ns on the latency path where an op is a cache key)
    __hash__ = object.__hash__

    # torch.distributed spells it PRODUCT; MPI and NCCL say PROD
    @classmethod
    def parse(cls, op: "ReduceOp | str") -> "ReduceOp":
        if isinstance(op, ReduceOp):
            return op
        if not isinstance(op, str) and not hasattr(op, "name") and hasattr(op, "op"):
            op = getattr(op, "op")  # a torch.distributed.ReduceOp instance wraps a RedOpType in .op
        if hasattr(op, "name") and not isinstance(op, str):  # e.g. torch.distributed.ReduceOp.SUM
            op = str(getattr(op, "name"))
        if isinstance(op, str):
            key = op.strip().lower()
            if "." in key:  # str(torch.distributed.ReduceOp.SUM) == "RedOpType.SUM"; "ReduceOp.SUM"
                key = key.rsplit(".", 1)[1]
            aliases = {"product": "prod", "mul": "prod", "average": "avg", "mean": "avg",
                       "and": "band", "or": "bor", "xor": "bxor"}
            key = aliases.get(key, key)
            for member in cls:
                if member.value == key or member.name.lower() == key:
                    return member
        raise ValueError(
            f"unknown reduce op {op!r}; expected one of {[m.name for m in cls]}"
        )


PROD = ReduceOp.PRODUCT  # MPI/NCCL spelling

_UFUNC = {
    ReduceOp.SUM: np.add,
    ReduceOp.AVG: np.add,
    ReduceOp.PRODUCT: np.multiply,
    ReduceOp.MIN: np.minimum,
    ReduceOp.MAX: np.maximum,
    ReduceOp.BAND: np.bitwise_and,
    ReduceOp.BOR: np.bitwise_or,
    ReduceOp.BXOR: np.bitwise_xor,
}


def _bfloat16() -> np.dtype | None:
    try:
        import ml_dtypes  # optional
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


INT_DTYPES = tuple(np.dtype(t) for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"))
FLOAT_DTYPES = tuple(np.dtype(t) for t in ("float16", "float32", "float64"))
COMPLEX_DTYPES = tuple(np.dtype(t) for t in ("complex64", "complex128"))


def numeric_dtypes() -> tuple[np.dtype, ...]:
    """Every dtype the reductions support here (bfloat16 when ml_dtypes is installed)."""
    bf = _bfloat16()
    return INT_DTYPES + FLOAT_DTYPES + ((bf,) if bf is not None else ()) + COMPLEX_DTYPES


def dtype_kind(dtype: Any) -> str:
    """'int', 'float', 'complex' or 'bool' for a supported dtype; TypeError otherwise."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return "bool"
    if dt in INT_DTYPES:
        return "int"
    if dt in FLOAT_DTYPES or dt == _bfloat16():
        return "float"
    if dt in COMPLEX_DTYPES:
        return "complex"
    raise TypeError(f"dtype {dt} is not supported by interlink reductions")


def ops_for_dtype(dtype: Any) -> tuple[ReduceOp, ...]:
    kind = dtype_kind(dtype)
    if kind == "int":
        return tuple(ReduceOp)
    if kind == "bool":
        return (ReduceOp.MIN, ReduceOp.MAX, ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR)
    if kind == "float":
        return (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG)
    return (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.AVG)  # complex: no ordering


def check_op_dtype(op: "ReduceOp | str", dtype: Any) -> ReduceOp:
    """Validate an (op, dtype) pair before any byte moves; returns the parsed op."""
    rop = ReduceOp.parse(op)
    dt = np.dtype(dtype)
    if rop not in ops_for_dtype(dt):
        raise TypeError(
            f"reduce op {rop.name} is not defined for dtype {dt} "
            f"(valid: {[o.name for o in ops_for_dtype(dt)]})"
        )
    return rop


def ufunc(op: ReduceOp) -> np.ufunc:
    return _UFUNC[op]


def reduce_into(op: ReduceOp, dst: np.ndarray, src: np.ndarray) -> None:
    """dst = dst (op) src, in place, no temporary."""
    _UFUNC[op](dst, src, out=dst)


def reduce_from(op: ReduceOp, dst: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """dst = a (op) b."""
    _UFUNC[op](a, b, out=dst)


def finish_avg(arr: np.ndarray, nranks: int) -> None:
    """Turn a SUM into an AVG in place: floats divide, integers truncate toward zero."""
    if nranks == 1 or arr.size == 0:
        return
    kind = dtype_kind(arr.dtype)
    if kind in ("float", "complex"):
        np.divide(arr, arr.dtype.type(nranks), out=arr, casting="unsafe")
    else:
        if arr.dtype.kind == "u":
            np.floor_divide(arr, arr.dtype.type(nranks), out=arr)
        else:
            # truncate toward zero without overflowing on the most negative value
            q = np.floor_divide(arr, arr.dtype.type(nranks))
            r = arr - q * arr.dtype.type(nranks)
            q += ((arr < 0) & (r != 0)).astype(arr.dtype)
            arr[...] = q


def numpy_reduce(op: ReduceOp, arrays: list[np.ndarray]) -> np.ndarray:
    """Reference result of reducing equal-shaped arrays with op, computed directly with numpy."""
    if not arrays:
        raise ValueError("nothing to reduce")
    stacked = np.stack(arrays)
    if op in (ReduceOp.SUM, ReduceOp.AVG):
        out = np.add.reduce(stacked, axis=0, dtype=stacked.dtype)
    else:
        out = _UFUNC[op].reduce(stacked, axis=0)
    out = np.ascontiguousarray(out, dtype=stacked.dtype)
    if op is ReduceOp.AVG:
        finish_avg(out, len(arrays))
    return out
