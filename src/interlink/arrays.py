"""Array adapters: numpy arrays, torch CPU tensors and buffer-protocol objects as flat numpy views.

Every adapter shares memory with the caller's object (zero-copy); results written into the view are
visible in the original. Validation happens here, before any byte moves: contiguity, writability,
supported dtype. torch is imported lazily and only when a tensor is passed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: a torch bfloat16 tensor's values to reduce where ml_dtypes is absent (the same dtype as ops.BFLOAT16_RAW)
BFLOAT16_RAW = np.dtype("V2")


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "is_contiguous") and hasattr(x, "dtype")


def _bfloat16_np() -> np.dtype | None:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def is_array(x: Any) -> bool:
    if isinstance(x, np.ndarray) or _is_torch(x):
        return True
    try:
        memoryview(x)
        return True
    except TypeError:
        return False


def device_of(x: Any) -> str:
    """'cpu' or e.g. 'cuda:0'."""
    if _is_torch(x):
        return str(x.device)
    return "cpu"


def as_flat(x: Any, name: str = "tensor", writable: bool = True, reducing: bool = False) -> np.ndarray:
    """A flat (1-D, C-contiguous) numpy view of x sharing its memory.

    Raises TypeError for unsupported objects/dtypes and ValueError for non-contiguous or read-only
    arrays, before anything is sent.
    """
    if type(x) is np.ndarray and x.ndim == 1 and x.flags.c_contiguous and (x.flags.writeable or not writable) \
            and not x.dtype.hasobject and x.dtype.fields is None:
        return x  # the common case, checked in one go
    if isinstance(x, np.ndarray):
        arr = x
        if not arr.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous (got strides {arr.strides} for shape {arr.shape}); "
                             f"pass np.ascontiguousarray({name})")
        if writable and not arr.flags.writeable:
            raise ValueError(f"{name} is read-only; interlink writes results into it")
        if arr.dtype.hasobject or arr.dtype.fields is not None:
            raise TypeError(f"{name} has dtype {arr.dtype}, which cannot be communicated")
        return arr.reshape(-1)
    if _is_torch(x):
        import torch

        if x.device.type != "cpu":
            raise TypeError(f"{name} lives on {x.device}; GPU tensors need the cuda transports (not available here)")
        if not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous (got stride {tuple(x.stride())} for shape {tuple(x.shape)}); "
                             f"call .contiguous() first")
        if x.requires_grad and x.is_leaf and writable:
            raise ValueError(f"{name} is a leaf tensor that requires grad; pass tensor.detach() or use torch.no_grad()")
        t = x.detach()
        if t.dtype == torch.bfloat16:
            # numpy has no bfloat16: ml_dtypes' where it is installed, else the raw values, which the
            # reductions widen to float32 and round back as torch does (ops.BFLOAT16_RAW)
            bf = _bfloat16_np()
            raw = _torch_view(t.view(torch.int16), np.dtype(np.int16))
            if bf is None:
                return raw.view(BFLOAT16_RAW) if reducing else raw.view(np.uint16)
            return raw.view(bf)
        dt = _TORCH_NP.get(t.dtype)
        if dt is None:
            try:
                dt = _TORCH_NP[t.dtype] = torch.empty(0, dtype=t.dtype).numpy().dtype
            except (TypeError, RuntimeError) as e:
                raise TypeError(f"{name} has dtype {t.dtype}, which interlink cannot communicate: {e}") from None
        return _torch_view(t, dt)
    try:
        mv = memoryview(x)
    except TypeError:
        raise TypeError(f"{name} must be a numpy array, a torch tensor or a buffer-protocol object, "
                        f"got {type(x).__name__}") from None
    if not mv.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if writable and mv.readonly:
        raise ValueError(f"{name} is read-only (e.g. bytes); use a bytearray or numpy array")
    arr = np.frombuffer(mv, dtype=np.dtype(mv.format) if mv.format not in ("B", "c") else np.uint8)
    return arr.reshape(-1)


_TORCH_NP: dict = {}  # torch dtype -> numpy dtype


class _TorchMem:
    """A contiguous CPU tensor's memory for numpy (the view's base holds the tensor). Not
    ``Tensor.numpy()``: that marks the tensor's storage not resizable for good, and FSDP frees its
    gathered parameters by resizing their storage to 0 after the all_gather wrote them."""

    __slots__ = ("__array_interface__", "t")

    def __init__(self, t: Any, dt: np.dtype) -> None:
        self.t = t
        self.__array_interface__ = {"data": (t.data_ptr(), False), "shape": (t.numel(),), "typestr": dt.str,
                                    "version": 3}


def _torch_view(t: Any, dt: np.dtype) -> np.ndarray:
    if t.numel() == 0:
        return np.empty(0, dtype=dt)
    return np.asarray(_TorchMem(t, dt))


def dtype_name(x: Any) -> str:
    if _is_torch(x):
        return str(x.dtype).replace("torch.", "")
    return str(np.asarray(as_flat(x, writable=False)).dtype)


# ---- the buffer contract: which overlaps of an input and an output a call accepts -----------------
# (NCCL's and torch's in-place layouts; every other overlap is refused before any byte moves)
IN_PLACE_LAYOUT = {
    "all_gather": "input = output[rank*n:(rank+1)*n]",
    "reduce_scatter": "output = input[rank*n:(rank+1)*n]",
    "all_to_all": None,  # no in-place form: input and output must not overlap
}


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def check_overlap(call: str, collective: str, inp: np.ndarray, out: np.ndarray, rank: int) -> bool:
    """Validate how a call's flat input and output share memory (sizes already checked). Returns True
    for the collective's in-place layout, False when they are disjoint; raises ValueError naming the call
    for any other overlap.

    - all_gather: in place when input is output[rank*n:(rank+1)*n] (n = input size);
    - reduce_scatter: in place when output is input[rank*n:(rank+1)*n] (n = output size);
    - all_to_all: input and output must not overlap.
    Both arrays are contiguous, so sharing memory is the same as overlapping address ranges."""
    if inp.size == 0 or out.size == 0 or not np.may_share_memory(inp, out):
        return False
    return check_overlap_at(call, collective, _addr(inp), inp.size, _addr(out), out.size, inp.dtype.itemsize, rank)


def check_overlap_at(call: str, collective: str, ia: int, isize: int, oa: int, osize: int, isz: int,
                     rank: int) -> bool:
    """:func:`check_overlap` on address ranges (device buffers: pointers): input ``isize`` elements at
    ``ia``, output ``osize`` at ``oa``, ``isz`` bytes each."""
    if isize == 0 or osize == 0 or not (ia < oa + osize * isz and oa < ia + isize * isz):
        return False
    layout = IN_PLACE_LAYOUT[collective]
    if collective == "all_gather":
        want, got = oa + rank * isize * isz, ia
    elif collective == "reduce_scatter":
        want, got = ia + rank * osize * isz, oa
    else:
        want, got = None, None
    if want is not None and want == got:
        return True
    if layout is None:
        raise ValueError(f"{call}: input and output overlap in memory ({_span(ia, isize, oa, osize, isz)}); "
                         f"{collective} has no in-place form: pass separate buffers")
    if collective == "all_gather":
        where = (got - oa) / isz
        detail = f"input starts at output element {where:g}, rank {rank}'s block starts at {rank * isize}"
    else:
        where = (got - ia) / isz
        detail = f"output starts at input element {where:g}, rank {rank}'s block starts at {rank * osize}"
    raise ValueError(f"{call}: input and output overlap in memory but not in the in-place layout "
                     f"({layout}; {detail}); pass that exact view or separate buffers")


def _span(ia: int, isize: int, oa: int, osize: int, isz: int) -> str:
    return (f"input bytes [0, {isize * isz}) and output bytes [{oa - ia}, {oa - ia + osize * isz}) "
            f"relative to the input")
