"""Low-precision dtypes (float8, float4, int4/uint4, int2/uint2): their numpy mapping, the cast,
bitcast and quantization ops on them, the ops that reject them, and .tcir storage."""

import hashlib

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tcc.ir import irfile
from tcc.ir.builder import FunctionBuilder
from tcc.ir.dtype import (
    DTYPES,
    LOW_PRECISION,
    bit_width,
    from_numpy,
    is_float,
    is_int,
    to_low_precision,
    to_numpy,
)
from tcc.ir.errors import IRFileError, ShapeError
from tcc.ir.expr import Var, prove_equal
from tcc.ir.graph import TensorType
from tcc.ir.interp import run
from tcc.ir.module import IRModule
from tcc.ir.printer import print_module
from tests.helpers import infer, run_op
from tests.ir.test_irfile_container import rewrite

N = Var("n")
INF, NAN = np.inf, np.nan


def _f32(*values):
    return np.array(values, np.float32)


def _bits(a) -> list[int]:
    return np.asarray(a).view(np.uint8).tolist()


# -- the dtypes ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", sorted(LOW_PRECISION))
def test_each_type_is_held_in_its_ml_dtypes_dtype(dtype):
    assert dtype in DTYPES
    assert to_numpy(dtype) == np.dtype(getattr(ml_dtypes, dtype))
    assert from_numpy(to_numpy(dtype)) == dtype
    assert not is_float(dtype) and not is_int(dtype)  # storage only: no arithmetic


def test_bit_width_counts_the_bits_of_one_value_not_its_byte():
    assert [bit_width(d) for d in ("int2", "uint4", "float4_e2m1fn", "float8_e5m2")] == [2, 4, 4, 8]
    assert bit_width("float32") == 32 and bit_width("bool") == 8


def test_arithmetic_ops_reject_low_precision_operands_by_name():
    t = TensorType((N,), "float8_e4m3fn")
    with pytest.raises(ShapeError, match="dtype float8_e4m3fn"):
        infer("add", t, t)
    with pytest.raises(ShapeError, match="dtype int4"):
        infer("exp", TensorType((N,), "int4"))


# -- cast ------------------------------------------------------------------------------------


def test_cast_to_and_from_low_precision_keeps_symbolic_shapes():
    for dtype in LOW_PRECISION:
        t = infer("cast", TensorType((N, 3), "float16"), dtype=dtype)
        assert t.dtype == dtype and prove_equal(t.shape[0], N) and t.shape[1] == 3
        assert infer("cast", t, dtype="float32") == TensorType(t.shape, "float32")


def test_cast_rejects_an_unknown_round_mode():
    with pytest.raises(ShapeError, match="round_mode 'odd'"):
        infer("cast", TensorType((2,), "float32"), dtype="float8_e8m0fnu", round_mode="odd")


# The ONNX Cast table: saturation clamps overflow and infinities to the largest finite value;
# without it e5m2 overflows to inf and the other float8 types to NaN; fnuz types have no -0.
OVERFLOW = _f32(0.3, -1e6, INF, -INF, NAN, -0.0)
CASES = {
    ("float8_e4m3fn", True): [0.3125, -448, 448, -448, NAN, -0.0],
    ("float8_e4m3fn", False): [0.3125, NAN, NAN, NAN, NAN, -0.0],
    ("float8_e5m2", True): [0.3125, -57344, 57344, -57344, NAN, -0.0],
    ("float8_e5m2", False): [0.3125, -INF, INF, -INF, NAN, -0.0],
    ("float8_e4m3fnuz", True): [0.3125, -240, 240, -240, NAN, 0.0],
    ("float8_e4m3fnuz", False): [0.3125, NAN, NAN, NAN, NAN, 0.0],
    ("float8_e5m2fnuz", True): [0.3125, -57344, 57344, -57344, NAN, 0.0],
    ("float8_e5m2fnuz", False): [0.3125, NAN, NAN, NAN, NAN, 0.0],
}


@pytest.mark.parametrize("dtype, saturate", sorted(CASES))
def test_cast_to_float8_saturates_as_onnx_specifies(dtype, saturate):
    got = run_op("cast", OVERFLOW, dtype=dtype, saturate=saturate)
    assert got.dtype == to_numpy(dtype)
    want = np.array(CASES[dtype, saturate], np.float32)
    np.testing.assert_array_equal(got.astype(np.float32), want)
    assert np.signbit(got.astype(np.float32)[-1]) == np.signbit(want[-1])


def test_cast_to_float8_rounds_to_nearest_even():
    # e4m3fn has 3 mantissa bits: 1.0625 lies halfway between 1 and 1.125.
    got = run_op("cast", _f32(1.0625, 1.1875, 1.07), dtype="float8_e4m3fn")
    np.testing.assert_array_equal(got.astype(np.float32), [1.0, 1.25, 1.125])


def test_cast_to_float4_saturates_and_to_sub_byte_ints_wraps():
    got = run_op("cast", _f32(0.25, 1.75, 5.0, 100, -INF), dtype="float4_e2m1fn")
    np.testing.assert_array_equal(got.astype(np.float32), [0.0, 2.0, 4.0, 6.0, -6.0])
    nan = run_op("cast", _f32(np.nan, -np.nan), dtype="float4_e2m1fn")  # ONNX's test data: 0x8
    np.testing.assert_array_equal(nan.view(np.uint8), [0x8, 0x0])
    np.testing.assert_array_equal(
        run_op("cast", _f32(-9, 7, 8, 15), dtype="int4").astype(int), [7, 7, -8, -1]
    )
    np.testing.assert_array_equal(
        run_op("cast", np.int8([-3, 4]), dtype="uint2").astype(int), [1, 0]
    )


def test_cast_from_low_precision_is_exact():
    x = np.array([-8, -1, 0, 7], ml_dtypes.int4)
    np.testing.assert_array_equal(run_op("cast", x, dtype="int8"), np.int8([-8, -1, 0, 7]))
    y = np.array([0.5, -448, 3.25], ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(run_op("cast", y, dtype="float16"), np.float16([0.5, -448, 3.25]))
    between = run_op("cast", y, dtype="float8_e5m2")  # 3.25 ties to even: 3.0 = 1.10b * 2
    np.testing.assert_array_equal(between.astype(np.float32), [0.5, -448, 3.0])


@pytest.mark.parametrize(
    "round_mode, want",
    [("up", [-127, -2, 0, 1, 2, 127]), ("down", [-127, -3, 0, 1, 1, 127]),
     ("nearest", [-127, -2, 0, 1, 2, 127])],
)  # fmt: skip
def test_cast_to_float8_e8m0_rounds_to_a_power_of_two(round_mode, want):
    x = _f32(0.0, 0.2, 1.0, 2.0, 3.0, 2.0**127 * 1.5)
    got = run_op("cast", x, dtype="float8_e8m0fnu", round_mode=round_mode)
    np.testing.assert_array_equal(np.log2(got.astype(np.float64)), want)


def test_cast_to_float8_e8m0_out_of_range_saturates_or_gives_nan():
    x = _f32(3e38, INF, 0.0, 1e-40, NAN)
    assert _bits(run_op("cast", x, dtype="float8_e8m0fnu")) == [0xFE, 0xFE, 0, 0, 0xFF]
    assert _bits(run_op("cast", x, dtype="float8_e8m0fnu", saturate=False)) == [0xFF] * 5


# -- bitcast ---------------------------------------------------------------------------------


def test_bitcast_between_types_of_one_width():
    x = np.array([-1, 7, -8], ml_dtypes.int4)
    np.testing.assert_array_equal(run_op("bitcast", x, dtype="uint4").astype(int), [15, 7, 8])
    as_float4 = run_op("bitcast", x, dtype="float4_e2m1fn")
    np.testing.assert_array_equal(as_float4.astype(np.float32), [-6.0, 6.0, -0.0])
    f8 = np.array([1.0, -2.0], ml_dtypes.float8_e4m3fn)
    assert run_op("bitcast", f8, dtype="uint8").tolist() == [0x38, 0xC0]
    with pytest.raises(ShapeError, match="int4 has 4 bits but int8 has 8"):
        infer("bitcast", TensorType((N,), "int4"), dtype="int8")


# -- quantization ----------------------------------------------------------------------------


def test_quantize_to_low_precision_infers_blocked_symbolic_shapes():
    x = TensorType((N, 8), "float32")
    scale = TensorType((N, 2), "float32")
    for dtype in ("int4", "uint2", "float8_e4m3fn", "float4_e2m1fn"):
        t = infer("quantize_linear", x, scale, None, axis=1, block_size=4, out_dtype=dtype)
        assert t.dtype == dtype and prove_equal(t.shape[0], N)
        back = infer("dequantize_linear", t, scale, None, axis=1, block_size=4)
        assert back.dtype == "float32" and back.shape == t.shape
    with pytest.raises(ShapeError, match="unsupported output dtype float8_e8m0fnu"):
        infer("quantize_linear", x, scale, None, block_size=4, out_dtype="float8_e8m0fnu")


def test_quantize_to_sub_byte_ints_clamps_to_their_range():
    x = _f32(-100, -2.6, 0.4, 1.5, 2.5, 100)
    scale = np.float32(1.0)
    for dtype, lo, hi in (("int4", -8, 7), ("uint4", 0, 15), ("int2", -2, 1), ("uint2", 0, 3)):
        got = run_op("quantize_linear", x, scale, None, out_dtype=dtype)
        assert got.dtype == to_numpy(dtype)
        want = np.clip(np.rint(x), lo, hi)
        np.testing.assert_array_equal(got.astype(np.float32), want)


def test_quantize_int4_blocked_with_zero_point():
    x = _f32(0, 1, 2, 3, 4, 5).reshape(1, 6)
    scale = _f32(1, 2).reshape(1, 2)
    zp = np.array([[1, -1]], ml_dtypes.int4)
    got = run_op("quantize_linear", x, scale, zp, axis=1, block_size=4, out_dtype="int4")
    np.testing.assert_array_equal(got.astype(int), [[1, 2, 3, 4, 1, 1]])  # 2.5 rounds to 2
    back = run_op("dequantize_linear", got, scale, zp, axis=1, block_size=4)
    np.testing.assert_array_equal(back, [[0, 1, 2, 3, 4, 4]])


def test_quantize_to_float8_rounds_and_saturates():
    x = _f32(1.0, 500.0, -INF)
    got = run_op("quantize_linear", x, np.float32(0.5), None, out_dtype="float8_e4m3fn")
    np.testing.assert_array_equal(got.astype(np.float32), [2.0, 448, -448])
    wild = run_op(
        "quantize_linear", x, np.float32(0.5), None, out_dtype="float8_e5m2", saturate=False
    )
    np.testing.assert_array_equal(wild.astype(np.float32), [2.0, 1024, -INF])
    f4 = run_op("quantize_linear", x, np.float32(0.5), None, out_dtype="float4_e2m1fn")
    np.testing.assert_array_equal(f4.astype(np.float32), [2.0, 6.0, -6.0])


def test_dequantize_low_precision_to_the_scale_or_output_dtype():
    x = np.array([0.5, -3.0, 448], ml_dtypes.float8_e4m3fn)
    got = run_op("dequantize_linear", x, np.float16(2.0), None)
    np.testing.assert_array_equal(got, np.float16([1.0, -6.0, 896]))
    u2 = np.array([0, 3], ml_dtypes.uint2)
    got = run_op("dequantize_linear", u2, np.float32(0.5), np.array(1, ml_dtypes.uint2))
    np.testing.assert_array_equal(got, _f32(-0.5, 1.0))


_MINIFLOATS = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")


def _finite_grid(dtype):
    """Every finite value of a format with its code, decoded by its bit layout alone."""
    codes = np.arange(16 if dtype == "float4_e2m1fn" else 256, dtype=np.uint8)
    values = codes.view(to_numpy(dtype)).astype(np.float64)
    keep = np.isfinite(values)
    return codes[keep], values[keep]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(_MINIFLOATS),
    st.floats(-600, 600, allow_nan=False, width=32) | st.floats(-2, 2, width=32),
)
def test_in_range_floats_round_to_the_nearest_value_ties_to_the_even_code(dtype, x):
    codes, values = _finite_grid(dtype)
    top = values.max()
    if abs(x) > top:  # overflow is the saturation tests' business
        x = float(np.clip(x, -top, top))
    got = to_low_precision(np.float32([x]), dtype)
    distance = np.abs(values - x)
    nearest = distance == distance.min()
    candidates = codes[nearest]
    want = candidates[candidates % 2 == 0] if nearest.sum() > 1 else candidates
    want_values = values[np.isin(codes, want)]
    assert got.astype(np.float64)[0] in want_values
    if got.astype(np.float64)[0] == 0:  # zero keeps the sign of x, but the fnuz types have no -0
        assert np.signbit(got.astype(np.float32)[0]) == (np.signbit(x) and "fnuz" not in dtype)


def test_to_low_precision_converts_between_low_precision_types():
    x = np.array([7, -8], ml_dtypes.int4)
    np.testing.assert_array_equal(to_low_precision(x, "float8_e5m2").astype(np.float32), [7, -8])


# -- .tcir storage ---------------------------------------------------------------------------


def _samples():
    values = _f32(-1.5, 0.0, 0.5, 2.0, 3.0, 1.0).reshape(2, 3)
    out = {d: to_low_precision(values, d) for d in LOW_PRECISION if d != "float8_e8m0fnu"}
    out["float8_e8m0fnu"] = np.array([[0.25, 1.0, 4.0]], ml_dtypes.float8_e8m0fnu)
    for d in ("uint4", "uint2"):
        out[d] = np.abs(values).astype(np.int8).astype(to_numpy(d))
    return out


def test_container_round_trips_every_low_precision_dtype(tmp_path):
    arrays = _samples()
    irfile.write_container(tmp_path / "m.tcir", "x\n", arrays, producer="tcc test")
    for mmap in (True, False):
        _, got, manifest = irfile.read_container(tmp_path / "m.tcir", mmap=mmap)
        for name, a in arrays.items():
            assert got[name].dtype == a.dtype and got[name].shape == a.shape
            assert _bits(got[name]) == _bits(a)
        assert {e["dtype"] for e in manifest["arrays"]} == set(LOW_PRECISION)


def test_container_stores_sub_byte_values_without_high_bits(tmp_path):
    junk = np.uint8([0xF3, 0x0E]).view(ml_dtypes.int4)  # reads as 3, -2
    irfile.write_container(tmp_path / "m.tcir", "x\n", {"w": junk}, producer="tcc test")
    _, got, _ = irfile.read_container(tmp_path / "m.tcir")
    assert _bits(got["w"]) == [0x03, 0x0E] and got["w"].astype(int).tolist() == [3, -2]


def test_container_rejects_a_sub_byte_array_with_high_bits_set(tmp_path):
    path = tmp_path / "m.tcir"
    irfile.write_container(path, "x\n", {"w": np.array([1, 2], ml_dtypes.uint2)}, producer="t")
    manifest = irfile.read_container(path)[2]
    e = manifest["arrays"][0]
    e["sha256"] = hashlib.sha256(b"\x07\x02").hexdigest()  # only the value check objects
    rewrite(path, manifest, patch=[(e["offset"], b"\x07\x02")])
    with pytest.raises(IRFileError, match="'w' is uint2 but holds bytes other than 0 to 3"):
        irfile.read_container(path)


def test_module_with_low_precision_constants_saves_and_loads(tmp_path):
    mod = IRModule()
    w = mod.add_constant("w", np.array([[1, -2], [3, -8]], ml_dtypes.int4))
    s = mod.add_constant("s", np.array([0.5, 2.0], ml_dtypes.float8_e4m3fn))
    bb = FunctionBuilder()
    scale = bb.emit("cast", s, dtype="float32")
    y = bb.emit("dequantize_linear", w, scale, None, axis=1)
    mod.functions["main"] = bb.finish([y], ["y"])
    irfile.save_module(tmp_path / "m.tcir", mod)
    back = irfile.load_module(tmp_path / "m.tcir")
    assert print_module(back) == print_module(mod)
    assert back.const_values["w"].dtype == to_numpy("int4")
    np.testing.assert_array_equal(run(back, {})[0], _f32(0.5, -4, 1.5, -16).reshape(2, 2))


@pytest.mark.parametrize("op, attrs", [("matmul", {}), ("reduce_max", {"axes": [0]}), ("reduce_sum", {"axes": [0]})])
def test_computing_ops_reject_storage_types(op, attrs):
    from tcc.ir.builder import FunctionBuilder
    from tcc.ir.errors import ShapeError
    from tcc.ir.graph import TensorType

    bb = FunctionBuilder()
    x = bb.param("x", TensorType((4, 4), "int4"))
    with pytest.raises(ShapeError, match=f"op {op}: int4 is a storage type"):
        bb.emit(op, *([x, x] if op == "matmul" else [x]), **attrs)
