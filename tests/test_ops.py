"""interlink.ops: op parsing, the (op, dtype) validity table, AVG finishing and the numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

import interlink
from interlink import ops
from interlink.ops import (
    PROD,
    ReduceOp,
    check_op_dtype,
    dtype_kind,
    finish_avg,
    numeric_dtypes,
    numpy_reduce,
    ops_for_dtype,
    reduce_from,
    reduce_into,
)

ARITH = (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG)
BITWISE = (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR)


def _dt_id(dt) -> str:
    return str(np.dtype(dt))


# ---- ReduceOp.parse ----------------------------------------------------------------------------


def test_reduceop_exported_at_top_level() -> None:
    assert interlink.ReduceOp is ReduceOp
    assert PROD is ReduceOp.PRODUCT


@pytest.mark.parametrize("member", list(ReduceOp))
def test_parse_member_name_value(member: ReduceOp) -> None:
    assert ReduceOp.parse(member) is member
    assert ReduceOp.parse(member.name) is member
    assert ReduceOp.parse(member.name.lower()) is member
    assert ReduceOp.parse(member.value) is member
    assert ReduceOp.parse(member.value.upper()) is member
    assert ReduceOp.parse(f"  {member.value} ") is member
    assert ReduceOp.parse(f"ReduceOp.{member.name}") is member


@pytest.mark.parametrize("alias, expected", [
    ("product", ReduceOp.PRODUCT), ("PRODUCT", ReduceOp.PRODUCT), ("prod", ReduceOp.PRODUCT),
    ("PROD", ReduceOp.PRODUCT), ("mul", ReduceOp.PRODUCT), ("average", ReduceOp.AVG),
    ("mean", ReduceOp.AVG), ("and", ReduceOp.BAND), ("or", ReduceOp.BOR), ("xor", ReduceOp.BXOR),
])
def test_parse_aliases(alias: str, expected: ReduceOp) -> None:
    assert ReduceOp.parse(alias) is expected


@pytest.mark.parametrize("bad", ["summ", "", "premul_sum", "max2", 3, None, 1.5, object()])
def test_parse_unknown_raises_valueerror_naming_valid_ops(bad) -> None:
    with pytest.raises(ValueError) as ei:
        ReduceOp.parse(bad)
    msg = str(ei.value)
    assert "unknown reduce op" in msg
    for m in ReduceOp:
        assert m.name in msg


def test_parse_torch_distributed_reduceop() -> None:
    torch = pytest.importorskip("torch")
    td = pytest.importorskip("torch.distributed")
    if not td.is_available():
        pytest.skip("torch.distributed not built in")
    T = td.ReduceOp
    pairs = [(T.SUM, ReduceOp.SUM), (T.PRODUCT, ReduceOp.PRODUCT), (T.MIN, ReduceOp.MIN),
             (T.MAX, ReduceOp.MAX), (T.AVG, ReduceOp.AVG), (T.BAND, ReduceOp.BAND),
             (T.BOR, ReduceOp.BOR), (T.BXOR, ReduceOp.BXOR)]
    for theirs, ours in pairs:
        assert ReduceOp.parse(theirs) is ours
        assert ReduceOp.parse(str(theirs)) is ours  # "RedOpType.SUM"
        assert check_op_dtype(theirs, np.int32) is ours
    # a torch.distributed.ReduceOp instance (wraps a RedOpType)
    assert ReduceOp.parse(T(T.RedOpType.MAX)) is ReduceOp.MAX
    # an op interlink does not implement
    with pytest.raises(ValueError, match="PREMUL_SUM"):
        ReduceOp.parse(T.PREMUL_SUM)
    del torch


# ---- dtype tables ------------------------------------------------------------------------------


def test_numeric_dtypes_contents() -> None:
    dts = numeric_dtypes()
    names = {str(d) for d in dts}
    for n in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float16", "float32", "float64", "complex64", "complex128"):
        assert n in names
    assert len(set(dts)) == len(dts)
    try:
        import ml_dtypes
    except ImportError:
        assert "bfloat16" not in names
    else:
        assert np.dtype(ml_dtypes.bfloat16) in dts


@pytest.mark.parametrize("dt", numeric_dtypes(), ids=_dt_id)
def test_dtype_kind(dt) -> None:
    k = dtype_kind(dt)
    if np.dtype(dt).kind in "iu":
        assert k == "int"
    elif np.dtype(dt).kind == "c":
        assert k == "complex"
    else:
        assert k == "float"


def test_dtype_kind_bool_and_unsupported() -> None:
    assert dtype_kind(np.bool_) == "bool"
    for bad in (np.object_, "U4", "S3", "datetime64[s]", np.dtype([("a", "i4")])):
        with pytest.raises(TypeError, match="not supported"):
            dtype_kind(bad)


@pytest.mark.parametrize("dt", numeric_dtypes(), ids=_dt_id)
@pytest.mark.parametrize("op", ARITH, ids=lambda o: o.name)
def test_arith_ops_valid_except_ordering_on_complex(dt, op: ReduceOp) -> None:
    if np.dtype(dt).kind == "c" and op in (ReduceOp.MIN, ReduceOp.MAX):
        with pytest.raises(TypeError, match=op.name):
            check_op_dtype(op, dt)
        assert op not in ops_for_dtype(dt)
    else:
        assert check_op_dtype(op, dt) is op
        assert check_op_dtype(op.value, dt) is op  # strings too
        assert op in ops_for_dtype(dt)


@pytest.mark.parametrize("dt", numeric_dtypes() + (np.dtype(np.bool_),), ids=_dt_id)
@pytest.mark.parametrize("op", BITWISE, ids=lambda o: o.name)
def test_bitwise_ops_only_on_integers_and_bool(dt, op: ReduceOp) -> None:
    if np.dtype(dt).kind in "iub":
        assert check_op_dtype(op, dt) is op
    else:
        with pytest.raises(TypeError):
            check_op_dtype(op, dt)


def test_bool_table() -> None:
    assert set(ops_for_dtype(np.bool_)) == {ReduceOp.MIN, ReduceOp.MAX, *BITWISE}
    with pytest.raises(TypeError):
        check_op_dtype("sum", np.bool_)


def test_band_on_float32_message() -> None:
    with pytest.raises(TypeError) as ei:
        check_op_dtype(ReduceOp.BAND, np.float32)
    msg = str(ei.value)
    assert "BAND" in msg and "float32" in msg
    assert "SUM" in msg  # lists what is valid


def test_check_op_dtype_unknown_op_is_valueerror() -> None:
    with pytest.raises(ValueError):
        check_op_dtype("median", np.float32)


def test_check_op_dtype_unsupported_dtype() -> None:
    with pytest.raises(TypeError):
        check_op_dtype("sum", np.object_)


# ---- finish_avg ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "int64"])
def test_finish_avg_signed_truncates_toward_zero(dt) -> None:
    a = np.array([-7, 7, -6, 6, -1, 1, 0, -5, 5], dtype=dt)
    finish_avg(a, 2)
    assert a.dtype == np.dtype(dt)
    np.testing.assert_array_equal(a, np.array([-3, 3, -3, 3, 0, 0, 0, -2, 2], dtype=dt))
    b = np.array([-7, 7, -9, 9, -2, 2, -3, 3], dtype=dt)
    finish_avg(b, 3)
    np.testing.assert_array_equal(b, np.array([-2, 2, -3, 3, 0, 0, -1, 1], dtype=dt))


@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "int64"])
@pytest.mark.parametrize("n", [2, 3, 5, 7, 8])
def test_finish_avg_extremes_no_overflow(dt, n: int) -> None:
    info = np.iinfo(dt)
    vals = [info.min, info.min + 1, info.max, info.max - 1, -1, 1, 0]
    a = np.array(vals, dtype=dt)
    finish_avg(a, n)
    # exact: Python ints truncate toward zero via int(x / n) only for small values, so do it by hand
    exp = [(-(-v // n) if v < 0 else v // n) for v in vals]
    np.testing.assert_array_equal(a, np.array(exp, dtype=dt))


def test_finish_avg_most_negative_int64() -> None:
    a = np.array([np.iinfo(np.int64).min], dtype=np.int64)
    finish_avg(a, 2)
    assert int(a[0]) == -(2**62)
    a = np.array([np.iinfo(np.int64).min], dtype=np.int64)
    finish_avg(a, 3)
    assert int(a[0]) == -((2**63) // 3)  # -3074457345618258602, truncated toward zero


@pytest.mark.parametrize("dt", ["uint8", "uint16", "uint32", "uint64"])
def test_finish_avg_unsigned(dt) -> None:
    info = np.iinfo(dt)
    a = np.array([0, 1, 7, 8, info.max], dtype=dt)
    finish_avg(a, 2)
    np.testing.assert_array_equal(a, np.array([0, 0, 3, 4, info.max // 2], dtype=dt))


@pytest.mark.parametrize("dt", ["float16", "float32", "float64", "complex64", "complex128"])
def test_finish_avg_float_divides(dt) -> None:
    a = np.array([-7, 7, 1, 0, 3], dtype=dt)
    finish_avg(a, 2)
    assert a.dtype == np.dtype(dt)
    np.testing.assert_array_equal(a, np.array([-3.5, 3.5, 0.5, 0, 1.5], dtype=dt))
    c = np.array([3, -6, 1], dtype=dt)
    finish_avg(c, 3)
    np.testing.assert_allclose(c, np.array([1, -2, 1 / 3]), rtol=1e-3)


def test_finish_avg_bfloat16() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = np.dtype(ml_dtypes.bfloat16)
    a = np.array([-7, 7, 1, 3], dtype=bf)
    finish_avg(a, 2)
    assert a.dtype == bf
    np.testing.assert_array_equal(a.astype(np.float32), np.array([-3.5, 3.5, 0.5, 1.5], dtype=np.float32))


def test_finish_avg_noop_cases() -> None:
    a = np.array([-7, 7], dtype=np.int32)
    finish_avg(a, 1)
    np.testing.assert_array_equal(a, [-7, 7])
    e = np.empty(0, dtype=np.int64)
    finish_avg(e, 4)
    assert e.size == 0


def test_finish_avg_in_place_on_view() -> None:
    base = np.array([10, -7, 7, 10], dtype=np.int64)
    finish_avg(base[1:3], 2)
    np.testing.assert_array_equal(base, [10, -3, 3, 10])


# ---- reduce_into / reduce_from / numpy_reduce -------------------------------------------------------


def test_reduce_into_and_from_in_place() -> None:
    d = np.array([1, 5, -2], dtype=np.int32)
    reduce_into(ReduceOp.MAX, d, np.array([3, 4, -1], dtype=np.int32))
    np.testing.assert_array_equal(d, [3, 5, -1])
    out = np.zeros(3, dtype=np.float32)
    reduce_from(ReduceOp.PRODUCT, out, np.array([1, 2, 3], np.float32), np.array([4, 5, -6], np.float32))
    np.testing.assert_array_equal(out, [4, 10, -18])
    assert ops.ufunc(ReduceOp.AVG) is np.add  # AVG travels as SUM


def test_numpy_reduce_hand_computed_int() -> None:
    a = np.array([1, -4, 6, 0b1100], dtype=np.int32)
    b = np.array([2, 5, -3, 0b1010], dtype=np.int32)
    c = np.array([-8, 1, 7, 0b0110], dtype=np.int32)
    xs = [a, b, c]
    cases = {
        ReduceOp.SUM: [-5, 2, 10, 12 + 10 + 6],
        ReduceOp.PRODUCT: [-16, -20, -126, 12 * 10 * 6],
        ReduceOp.MIN: [-8, -4, -3, 6],
        ReduceOp.MAX: [2, 5, 7, 12],
        ReduceOp.AVG: [-1, 0, 3, 9],  # -5/3 -> -1, 2/3 -> 0, 10/3 -> 3, 28/3 -> 9
        ReduceOp.BAND: [1 & 2 & -8, -4 & 5 & 1, 6 & -3 & 7, 0b1100 & 0b1010 & 0b0110],
        ReduceOp.BOR: [1 | 2 | -8, -4 | 5 | 1, 6 | -3 | 7, 0b1110],
        ReduceOp.BXOR: [1 ^ 2 ^ -8, -4 ^ 5 ^ 1, 6 ^ -3 ^ 7, 0b1100 ^ 0b1010 ^ 0b0110],
    }
    for op, exp in cases.items():
        got = numpy_reduce(op, xs)
        assert got.dtype == np.int32, op
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got, np.array(exp, dtype=np.int32), err_msg=op.name)
    # inputs untouched
    np.testing.assert_array_equal(a, [1, -4, 6, 12])


def test_numpy_reduce_hand_computed_float() -> None:
    xs = [np.array([0.5, -1.0], np.float64), np.array([1.5, 4.0], np.float64)]
    np.testing.assert_array_equal(numpy_reduce(ReduceOp.SUM, xs), [2.0, 3.0])
    np.testing.assert_array_equal(numpy_reduce(ReduceOp.AVG, xs), [1.0, 1.5])
    np.testing.assert_array_equal(numpy_reduce(ReduceOp.PRODUCT, xs), [0.75, -4.0])
    np.testing.assert_array_equal(numpy_reduce(ReduceOp.MIN, xs), [0.5, -1.0])
    np.testing.assert_array_equal(numpy_reduce(ReduceOp.MAX, xs), [1.5, 4.0])


def test_numpy_reduce_keeps_narrow_dtype() -> None:
    # SUM of int8 wraps in int8 (like the algorithms), it is not promoted
    xs = [np.array([100, -100], np.int8), np.array([100, -100], np.int8)]
    got = numpy_reduce(ReduceOp.SUM, xs)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, np.array([200 - 256, -200 + 256], dtype=np.int8))
    u = [np.array([200], np.uint8), np.array([100], np.uint8)]
    assert numpy_reduce(ReduceOp.SUM, u).dtype == np.uint8
    assert int(numpy_reduce(ReduceOp.SUM, u)[0]) == 44
    f16 = [np.ones(3, np.float16)] * 4
    assert numpy_reduce(ReduceOp.SUM, f16).dtype == np.float16


def test_numpy_reduce_complex_and_single_and_empty() -> None:
    xs = [np.array([1 + 2j, 3j], np.complex64), np.array([2 - 1j, 1], np.complex64)]
    np.testing.assert_array_equal(numpy_reduce(ReduceOp.SUM, xs), np.array([3 + 1j, 1 + 3j], np.complex64))
    np.testing.assert_array_equal(numpy_reduce(ReduceOp.PRODUCT, xs), np.array([4 + 3j, 3j], np.complex64))
    one = np.array([-7, 7], np.int64)
    np.testing.assert_array_equal(numpy_reduce(ReduceOp.AVG, [one]), one)
    e = numpy_reduce(ReduceOp.SUM, [np.empty(0, np.float32)] * 3)
    assert e.shape == (0,) and e.dtype == np.float32
    with pytest.raises(ValueError):
        numpy_reduce(ReduceOp.SUM, [])


def test_numpy_reduce_multidim_shape_kept() -> None:
    xs = [np.arange(6, dtype=np.int64).reshape(2, 3) * (r + 1) for r in range(3)]
    got = numpy_reduce(ReduceOp.SUM, xs)
    assert got.shape == (2, 3)
    np.testing.assert_array_equal(got, np.arange(6).reshape(2, 3) * 6)


def test_bfloat16_sum_and_friends() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = np.dtype(ml_dtypes.bfloat16)
    assert dtype_kind(bf) == "float"
    assert check_op_dtype("sum", bf) is ReduceOp.SUM
    with pytest.raises(TypeError):
        check_op_dtype("band", bf)
    xs = [np.array([1.5, -2.0, 0.25, 256.0], dtype=bf), np.array([2.5, 4.0, 0.5, 1.0], dtype=bf)]
    got = numpy_reduce(ReduceOp.SUM, xs)
    assert got.dtype == bf
    # 256 + 1 is not representable in bfloat16 (8 bits of mantissa): rounds to even, 256
    np.testing.assert_array_equal(got.astype(np.float32), np.array([4.0, 2.0, 0.75, 256.0], np.float32))
    d = xs[0].copy()
    reduce_into(ReduceOp.SUM, d, xs[1])
    assert d.dtype == bf
    np.testing.assert_array_equal(d.astype(np.float32), got.astype(np.float32))
    np.testing.assert_array_equal(numpy_reduce(ReduceOp.MAX, xs).astype(np.float32), [2.5, 4.0, 0.5, 256.0])
    np.testing.assert_array_equal(numpy_reduce(ReduceOp.AVG, xs).astype(np.float32), [2.0, 1.0, 0.375, 128.0])


# ---- bfloat16 without ml_dtypes: raw values, widened to float32 and rounded back ----------------------


def test_bfloat16_raw_reductions_round_as_torch() -> None:
    torch = pytest.importorskip("torch")
    from interlink.ops import BFLOAT16_RAW, ufunc

    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(20000, generator=gen) * 100).bfloat16()
    y = (torch.randn(20000, generator=gen) * 100).bfloat16()
    # the edges: overflow to inf, inf - inf, NaN, subnormals, ties that round to even
    x[:6] = torch.tensor([3.3e38, float("inf"), float("nan"), 1e-39, 1.0, 256.0])
    y[:6] = torch.tensor([3.3e38, -float("inf"), 1.0, 1e-39, 2 ** -8, 1.0])

    def raw(t):
        return t.view(torch.int16).numpy().view(BFLOAT16_RAW)

    def back(a):
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)

    for op, ref in ((ReduceOp.SUM, torch.add), (ReduceOp.PRODUCT, torch.mul), (ReduceOp.MAX, torch.maximum),
                    (ReduceOp.MIN, torch.minimum)):
        out = np.empty(x.numel(), dtype=BFLOAT16_RAW)
        ufunc(op, BFLOAT16_RAW)(raw(x), raw(y), out)
        got, want = back(out), ref(x, y)
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num()), op
    a = raw(x).copy()
    finish_avg(a, 3)
    got, want = back(a), x / 3
    assert torch.equal(got.nan_to_num(), want.nan_to_num())
    assert dtype_kind(BFLOAT16_RAW) == "float" and ReduceOp.BAND not in ops_for_dtype(BFLOAT16_RAW)
