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


#: bfloat16 where numpy has no such type (ml_dtypes absent): the raw 2-byte values of a torch bfloat16
#: tensor. numpy's ufuncs refuse it, so every reduction of it goes through :class:`BFloat16Op`, which
#: computes each element in float32 and rounds back to nearest even, as torch, gloo and NCCL do.
BFLOAT16_RAW = np.dtype("V2")


class BFloat16Op:
    """A reduce op on :data:`BFLOAT16_RAW` arrays, called as a numpy ufunc is: ``op(a, b, out)``. Each
    element is widened to float32 (exact), combined, and rounded to bfloat16 to nearest even (NaN becomes
    0x7FC0), which is what torch's CPU kernels and gloo compute for a pair of bfloat16 values."""

    __slots__ = ("fn",)

    def __init__(self, fn: np.ufunc) -> None:
        self.fn = fn

    def __call__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.empty(np.shape(a), dtype=BFLOAT16_RAW)
        with np.errstate(all="ignore"):  # overflow to inf and inf - inf = NaN, as in torch
            r = self.fn(bf16_to_f32(a), bf16_to_f32(b))
        out.view(np.uint16)[...] = f32_to_bf16(r)
        return out


def bf16_to_f32(a: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bits (any 2-byte dtype): exact."""
    return (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(f: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) of float32 values, rounded to nearest even; NaN becomes 0x7FC0 (torch's)."""
    u = np.ascontiguousarray(f, dtype=np.float32).view(np.uint32)
    r = ((u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        r[nan] = 0x7FC0
    return r


INT_DTYPES = tuple(np.dtype(t) for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"))
FLOAT_DTYPES = tuple(np.dtype(t) for t in ("float16", "float32", "float64"))
COMPLEX_DTYPES = tuple(np.dtype(t) for t in ("complex64", "complex128"))


def numeric_dtypes() -> tuple[np.dtype, ...]:
    """Every dtype the reductions support here (bfloat16 as ml_dtypes' type when it is installed; a torch
    bfloat16 tensor reduces either way, as :data:`BFLOAT16_RAW`)."""
    bf = _bfloat16()
    return INT_DTYPES + FLOAT_DTYPES + ((bf,) if bf is not None else ()) + COMPLEX_DTYPES


def dtype_kind(dtype: Any) -> str:
    """'int', 'float', 'complex' or 'bool' for a supported dtype; TypeError otherwise."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return "bool"
    if dt in INT_DTYPES:
        return "int"
    if dt in FLOAT_DTYPES or dt == BFLOAT16_RAW or dt == _bfloat16():
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


def ufunc(op: ReduceOp, dtype: Any = None) -> Any:
    """The elementwise function of ``op`` on arrays of ``dtype``, called as ``fn(a, b, out)``: numpy's
    ufunc, or a :class:`BFloat16Op` for :data:`BFLOAT16_RAW`."""
    if dtype is not None and dtype == BFLOAT16_RAW:
        return BFloat16Op(_UFUNC[op])
    return _UFUNC[op]


def reduce_into(op: ReduceOp, dst: np.ndarray, src: np.ndarray) -> None:
    """dst = dst (op) src, in place (no temporary but for bfloat16 without ml_dtypes)."""
    ufunc(op, dst.dtype)(dst, src, out=dst)


def reduce_from(op: ReduceOp, dst: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """dst = a (op) b."""
    ufunc(op, dst.dtype)(a, b, out=dst)


def finish_avg(arr: np.ndarray, nranks: int) -> None:
    """Turn a SUM into an AVG in place: floats divide, integers truncate toward zero."""
    if nranks == 1 or arr.size == 0:
        return
    kind = dtype_kind(arr.dtype)
    if arr.dtype == BFLOAT16_RAW:
        with np.errstate(all="ignore"):
            arr.view(np.uint16)[...] = f32_to_bf16(bf16_to_f32(arr) / np.float32(nranks))
    elif kind in ("float", "complex"):
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
    if stacked.dtype == BFLOAT16_RAW:  # pairwise in rank order, each step rounded (as the ring does)
        out = stacked[0].copy()
        for a in stacked[1:]:
            reduce_into(ReduceOp.SUM if op is ReduceOp.AVG else op, out, a)
        if op is ReduceOp.AVG:
            finish_avg(out, len(arrays))
        return out
    if op in (ReduceOp.SUM, ReduceOp.AVG):
        out = np.add.reduce(stacked, axis=0, dtype=stacked.dtype)
    else:
        out = _UFUNC[op].reduce(stacked, axis=0)
    out = np.ascontiguousarray(out, dtype=stacked.dtype)
    if op is ReduceOp.AVG:
        finish_avg(out, len(arrays))
    return out
