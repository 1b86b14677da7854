"""interlink.arrays.as_flat: zero-copy flat views of numpy arrays, buffers and torch CPU tensors,
and the validation that happens before any byte moves."""

from __future__ import annotations

import array

import numpy as np
import pytest

from interlink import arrays
from interlink.arrays import as_flat, device_of, dtype_name, is_array

try:
    import torch
except ImportError:  # the torch tests skip, the rest still run
    torch = None

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")


def _shares(view: np.ndarray, obj) -> None:
    """The view is flat, contiguous and writes through it are visible in obj (checked by caller)."""
    assert view.ndim == 1
    assert view.flags.c_contiguous


# ---- numpy ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", ["int8", "uint16", "int32", "int64", "float16", "float32", "float64",
                                "complex64", "bool"])
def test_numpy_shares_memory(dt) -> None:
    x = np.zeros((2, 3, 4), dtype=dt)
    v = as_flat(x)
    _shares(v, x)
    assert v.size == 24 and v.dtype == x.dtype
    assert np.shares_memory(v, x)
    v[7] = 1
    assert x.reshape(-1)[7] == 1
    assert x[0, 1, 3] == 1


def test_numpy_zero_dim_and_empty() -> None:
    s = np.array(5.0)
    v = as_flat(s)
    v[0] = 2.0
    assert float(s) == 2.0
    e = np.empty((0, 4), dtype=np.float32)
    assert as_flat(e).shape == (0,)


def test_numpy_contiguous_slice_is_fine() -> None:
    base = np.zeros((4, 5), dtype=np.int32)
    row = base[2]
    v = as_flat(row)
    v[:] = 7
    assert (base[2] == 7).all() and base.sum() == 35


@pytest.mark.parametrize("make", [
    lambda: np.zeros(10)[::2],
    lambda: np.zeros((3, 4)).T,
    lambda: np.zeros((3, 4), order="F"),
    lambda: np.zeros((4, 4))[:, 1],
])
def test_numpy_non_contiguous_raises(make) -> None:
    with pytest.raises(ValueError, match="contiguous"):
        as_flat(make())
    with pytest.raises(ValueError, match="contiguous"):
        as_flat(make(), writable=False)


def test_numpy_read_only() -> None:
    x = np.arange(4)
    x.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        as_flat(x)
    v = as_flat(x, writable=False)  # a send buffer may be read-only
    np.testing.assert_array_equal(v, [0, 1, 2, 3])


@pytest.mark.parametrize("x", [np.array(["a", None], dtype=object),
                               np.zeros(2, dtype=[("a", "i4"), ("b", "f8")])])
def test_numpy_object_and_structured_rejected(x) -> None:
    with pytest.raises(TypeError):
        as_flat(x)


def test_name_in_messages() -> None:
    with pytest.raises(ValueError, match="output_tensor"):
        as_flat(np.zeros(10)[::2], name="output_tensor")
    with pytest.raises(TypeError, match="scatter_list\\[1\\]"):
        as_flat([1, 2], name="scatter_list[1]")


# ---- buffer protocol -----------------------------------------------------------------------------


def test_bytearray_shares_memory() -> None:
    b = bytearray(8)
    v = as_flat(b)
    _shares(v, b)
    assert v.dtype == np.uint8 and v.size == 8
    v[3] = 200
    assert b[3] == 200
    b[0] = 9
    assert v[0] == 9


def test_memoryview_shares_memory() -> None:
    b = bytearray(16)
    mv = memoryview(b)
    v = as_flat(mv)
    v[15] = 1
    assert b[15] == 1
    f = as_flat(memoryview(b).cast("f"))
    assert f.dtype == np.float32 and f.size == 4
    f[1] = 1.5
    assert np.frombuffer(b, dtype=np.float32)[1] == 1.5
    sub = as_flat(memoryview(b)[4:8])  # a contiguous slice
    sub[:] = 0xAB
    assert bytes(b[4:8]) == b"\xab" * 4


@pytest.mark.parametrize("code, dt", [("d", np.float64), ("f", np.float32), ("i", np.intc),
                                      ("q", np.int64), ("B", np.uint8), ("h", np.int16)])
def test_array_array_shares_memory(code, dt) -> None:
    a = array.array(code, [1, 2, 3, 4])
    v = as_flat(a)
    _shares(v, a)
    assert v.dtype == np.dtype(dt)
    np.testing.assert_array_equal(v, [1, 2, 3, 4])
    v[2] = 9
    assert a[2] == 9


def test_non_contiguous_memoryview_raises() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        as_flat(memoryview(bytearray(16))[::2])


def test_read_only_bytes() -> None:
    with pytest.raises(ValueError, match="read-only"):
        as_flat(b"abcd")
    with pytest.raises(ValueError, match="read-only"):
        as_flat(memoryview(b"abcd"))
    np.testing.assert_array_equal(as_flat(b"ab", writable=False), [97, 98])


@pytest.mark.parametrize("bad", [[1.0, 2.0], (1, 2), 3.0, "text", None, {"a": 1}])
def test_non_buffers_raise_typeerror(bad) -> None:
    with pytest.raises(TypeError, match="numpy array"):
        as_flat(bad)
    assert not is_array(bad)


def test_is_array_and_device_and_dtype_name() -> None:
    assert is_array(np.zeros(2)) and is_array(bytearray(2)) and is_array(b"x")
    assert device_of(np.zeros(2)) == "cpu" and device_of(bytearray(1)) == "cpu"
    assert dtype_name(np.zeros(2, np.float16)) == "float16"
    assert dtype_name(bytearray(2)) == "uint8"
    assert dtype_name(array.array("d", [1.0])) == "float64"


# ---- torch CPU tensors ----------------------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize("tdt, ndt", [("float32", np.float32), ("float64", np.float64), ("int64", np.int64),
                                      ("int32", np.int32), ("uint8", np.uint8), ("int8", np.int8),
                                      ("float16", np.float16), ("complex64", np.complex64)])
def test_torch_shares_memory(tdt, ndt) -> None:
    t = torch.zeros(2, 3, dtype=getattr(torch, tdt))
    v = as_flat(t)
    _shares(v, t)
    assert v.dtype == np.dtype(ndt) and v.size == 6
    v[4] = 3
    assert t[1, 1].item() == 3
    t[0, 2] = 5
    assert v[2] == 5
    assert is_array(t) and device_of(t) == "cpu" and dtype_name(t) == tdt


@needs_torch
def test_torch_bool_shares_memory() -> None:
    t = torch.zeros(5, dtype=torch.bool)
    v = as_flat(t)
    assert v.dtype == np.bool_
    v[1] = True
    assert t.tolist() == [False, True, False, False, False]


@needs_torch
@pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes not installed")
def test_torch_bfloat16_shares_memory_as_ml_dtypes() -> None:
    t = torch.zeros(2, 4, dtype=torch.bfloat16)
    v = as_flat(t)
    assert v.dtype == np.dtype(ml_dtypes.bfloat16) and v.size == 8
    v[5] = 1.5
    assert t[1, 1].item() == 1.5
    t[0, 0] = -2.0
    assert float(v[0]) == -2.0
    assert dtype_name(t) == "bfloat16"


@needs_torch
def test_torch_bfloat16_without_ml_dtypes_is_raw_uint16(monkeypatch) -> None:
    monkeypatch.setattr(arrays, "_bfloat16_np", lambda: None)
    t = torch.tensor([1.0, -2.0], dtype=torch.bfloat16)
    v = as_flat(t)
    assert v.dtype == np.uint16
    assert v.tolist() == [0x3F80, 0xC000]  # the raw bfloat16 bits
    v[0] = 0x4000  # 2.0
    assert t[0].item() == 2.0
    # to reduce: the same bits, as the dtype the reductions widen to float32 and round back (ops.BFLOAT16_RAW)
    r = as_flat(t, reducing=True)
    assert r.dtype == arrays.BFLOAT16_RAW and r.view(np.uint16).tolist() == [0x4000, 0xC000]


@needs_torch
def test_torch_storage_offset_and_multidim() -> None:
    base = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    row = base[1]  # contiguous, storage offset 4
    v = as_flat(row)
    np.testing.assert_array_equal(v, [4, 5, 6, 7])
    v[:] = -1
    assert base[1].tolist() == [-1, -1, -1, -1] and base[0, 0].item() == 0
    s = torch.tensor(3.0)  # 0-d
    sv = as_flat(s)
    assert sv.shape == (1,)
    sv[0] = 4.0
    assert s.item() == 4.0


@needs_torch
@pytest.mark.parametrize("make", [
    lambda: torch.zeros(3, 4).t(),
    lambda: torch.zeros(10)[::2],
    lambda: torch.zeros(4, 4)[:, 1],
    lambda: torch.zeros(2, 3, 4).permute(2, 0, 1),
])
def test_torch_non_contiguous_raises(make) -> None:
    with pytest.raises(ValueError, match="contiguous"):
        as_flat(make())


@needs_torch
def test_torch_requires_grad_leaf_raises() -> None:
    t = torch.ones(3, requires_grad=True)
    with pytest.raises(ValueError, match="requires grad"):
        as_flat(t)
    # as a read-only send buffer it is fine, and so is its detached view
    np.testing.assert_array_equal(as_flat(t, writable=False), [1, 1, 1])
    d = t.detach()
    as_flat(d)[0] = 5
    assert t[0].item() == 5  # detach shares storage
    with torch.no_grad():
        w = torch.ones(2)  # created under no_grad: does not require grad
        as_flat(w)


@needs_torch
def test_torch_unsupported_dtype_typeerror() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = torch.zeros(2, dtype=torch.complex32)
    with pytest.raises(TypeError, match="complex32"):
        as_flat(t)


@needs_torch
@pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torch_cuda_tensor_rejected() -> None:
    t = torch.zeros(4, device="cuda")
    assert device_of(t).startswith("cuda")
    with pytest.raises(TypeError, match="cuda"):
        as_flat(t)
