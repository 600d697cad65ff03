"""ONNX models on low-precision types (float8, float4, int4/uint4, int2/uint2): element types,
Cast/CastLike with saturate and round_mode, QuantizeLinear/DequantizeLinear, packed int4
initializers and low-precision graph inputs, checked against onnxruntime where it runs them."""

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from tcc.frontend.onnx import from_onnx
from tcc.frontend.onnx.base import onnx_dtype
from tcc.ir.errors import FrontendError
from tcc.ir.interp import run

ort = pytest.importorskip("onnxruntime")

EDGES = np.array([[0.3, -1000, np.inf, np.nan, 1e6, -0.0, 17.3, -2.2]], np.float32)
FLOAT8 = (TP.FLOAT8E4M3FN, TP.FLOAT8E5M2, TP.FLOAT8E4M3FNUZ, TP.FLOAT8E5M2FNUZ)


def _model(nodes, inputs, outputs, opset, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 11
    return model


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _same_as_ort(model, feeds):
    """tcc's outputs equal onnxruntime's bit for bit (NaNs in the same places)."""
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = run(from_onnx(model), feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def _round_trip(to, opset=25, shape=(1, 8), **attrs):
    """float32 -> `to` -> float32: onnxruntime returns no numpy arrays of the narrow types."""
    nodes = [
        helper.make_node("Cast", ["x"], ["q"], to=to, **attrs),
        helper.make_node("Cast", ["q"], ["y"], to=TP.FLOAT),
    ]
    return _model(nodes, [_vi("x", TP.FLOAT, shape)], [_vi("y", TP.FLOAT, shape)], opset)


def test_every_low_precision_element_type_has_a_tcc_dtype():
    codes = {
        TP.FLOAT8E4M3FN: "float8_e4m3fn", TP.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
        TP.FLOAT8E5M2: "float8_e5m2", TP.FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
        TP.FLOAT8E8M0: "float8_e8m0fnu", TP.FLOAT4E2M1: "float4_e2m1fn",
        TP.INT4: "int4", TP.UINT4: "uint4", TP.INT2: "int2", TP.UINT2: "uint2",
    }  # fmt: skip
    assert {code: onnx_dtype(code) for code in codes} == codes


@pytest.mark.parametrize("to", FLOAT8)
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_through_float8_against_ort(to, saturate):
    _same_as_ort(_round_trip(to, saturate=saturate), {"x": EDGES})


@pytest.mark.parametrize("to", [TP.INT4, TP.UINT4, TP.INT2, TP.UINT2])
def test_cast_through_sub_byte_ints_against_ort(to):
    x = np.arange(-9, 7, 2, dtype=np.float32).reshape(1, 8)
    _same_as_ort(_round_trip(to), {"x": x})


def _dense_values():
    """Every float16 value (inf and NaN included) as float32, then random values of three
    magnitudes: every rounding tie, subnormal and overflow of the narrow types is in there."""
    every_half = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    rng = np.random.default_rng(0)
    scaled = [rng.standard_normal(20000) * scale for scale in (1e-2, 30, 1e4)]
    with np.errstate(invalid="ignore"):  # float16's signalling NaNs become quiet ones
        return np.concatenate([every_half.astype(np.float32), *scaled]).astype(np.float32)


DENSE = _dense_values()
# Where onnxruntime departs from the ONNX Cast table without saturate (tcc.ir.low_precision):
# |x| rounds past the largest finite value, which the table makes NaN (e4m3fn) or inf (e5m2).
ORT_DEPARTS = {
    TP.FLOAT8E4M3FN: (lambda a: (a > 464) & (a < 496), np.nan),
    TP.FLOAT8E5M2: (lambda a: (a >= 61440) & (a < 65536), np.inf),
}


@pytest.mark.parametrize("to", FLOAT8)
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_float8_matches_ort_on_every_float16_value(to, saturate):
    model = _round_trip(to, shape=["n"], saturate=saturate)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": DENSE})[0]
    got = run(from_onnx(model), {"x": DENSE})[0]
    by_table = np.zeros(DENSE.shape, bool)
    if not saturate and to in ORT_DEPARTS:
        band, value = ORT_DEPARTS[to]
        by_table = band(np.abs(DENSE))
        assert by_table.sum() > 100
        np.testing.assert_array_equal(got[by_table], np.copysign(value, DENSE[by_table]))
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got)[~by_table], nan[~by_table])
    same = ~by_table & ~nan
    np.testing.assert_array_equal(got[same], want[same])
    np.testing.assert_array_equal(np.signbit(got[same]), np.signbit(want[same]))


@pytest.mark.parametrize("to", [TP.INT4, TP.UINT4, TP.INT2, TP.UINT2])
def test_cast_to_sub_byte_ints_matches_ort_on_every_float16_value(to):
    """Halves round away from zero, then the low bits are kept; NaN and inf give 0."""
    _same_as_ort(_round_trip(to, shape=["n"]), {"x": DENSE})


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_float8_e8m0_against_ort(round_mode, saturate):
    x = np.array([[0.3, 0.0, np.inf, 1e6, 3e38, 1e-40, 1.5, 3.0]], np.float32)
    model = _round_trip(TP.FLOAT8E8M0, saturate=saturate, round_mode=round_mode)
    _same_as_ort(model, {"x": x})


def test_cast_before_opset_19_saturates_float8():
    mod = from_onnx(_round_trip(TP.FLOAT8E4M3FN, opset=13))
    np.testing.assert_array_equal(run(mod, {"x": EDGES})[0][0, :3], [0.3125, -448, 448])


def test_castlike_takes_the_float8_type_of_its_second_operand():
    nodes = [
        helper.make_node("CastLike", ["x", "t"], ["q"], saturate=0),
        helper.make_node("Cast", ["q"], ["y"], to=TP.FLOAT),
    ]
    like = numpy_helper.from_array(np.zeros((), ml_dtypes.float8_e5m2), "t")
    model = _model(nodes, [_vi("x", TP.FLOAT, [1, 8])], [_vi("y", TP.FLOAT, [1, 8])], 21, [like])
    _same_as_ort(model, {"x": EDGES})


def test_float8_and_int4_graph_inputs_take_ml_dtypes_arrays():
    nodes = [
        helper.make_node("Cast", ["a"], ["fa"], to=TP.FLOAT),
        helper.make_node("Cast", ["b"], ["fb"], to=TP.FLOAT),
        helper.make_node("Add", ["fa", "fb"], ["y"]),
    ]
    inputs = [_vi("a", TP.FLOAT8E4M3FN, ["n"]), _vi("b", TP.INT4, ["n"])]
    mod = from_onnx(_model(nodes, inputs, [_vi("y", TP.FLOAT, ["n"])], 21))
    a = np.array([0.5, -3.0, 448], ml_dtypes.float8_e4m3fn)
    b = np.array([1, -8, 7], ml_dtypes.int4)
    np.testing.assert_array_equal(run(mod, {"a": a, "b": b})[0], [1.5, -11, 455])
    with pytest.raises(Exception, match="expected dtype float8_e4m3fn"):
        run(mod, {"a": a.astype(np.float32), "b": b})


def _qdq(zero_point, opset=21, **attrs):
    """QuantizeLinear then DequantizeLinear of a (2, 8) float input with blocked scales."""
    scale = numpy_helper.from_array(np.array([[0.5, 2], [0.25, 1]], np.float32), "s")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1, block_size=4, **attrs),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1, block_size=4),
    ]
    inits = [scale, numpy_helper.from_array(zero_point, "z")]
    return _model(nodes, [_vi("x", TP.FLOAT, [2, 8])], [_vi("y", TP.FLOAT, [2, 8])], opset, inits)


@pytest.mark.parametrize(
    "zero_point",
    [
        np.array([[1, -2], [0, 3]], ml_dtypes.int4),
        np.array([[1, 15], [0, 8]], ml_dtypes.uint4),
        np.zeros((2, 2), ml_dtypes.float8_e4m3fn),
        np.zeros((2, 2), ml_dtypes.float8_e5m2),
    ],
    ids=lambda z: z.dtype.name,
)
def test_blocked_quantize_dequantize_against_ort(zero_point):
    x = np.linspace(-300, 300, 16, dtype=np.float32).reshape(2, 8)
    _same_as_ort(_qdq(zero_point), {"x": x})


def test_quantize_to_float8_without_saturation_against_ort():
    x = np.array([[1, -7, 1e5, -1e5, 3, 0.1, 20, -0.3]] * 2, np.float32)
    _same_as_ort(_qdq(np.zeros((2, 2), ml_dtypes.float8_e4m3fn), saturate=0), {"x": x})


def test_packed_int4_weights_dequantize_against_ort():
    w = np.array([[-8, -1, 0, 7], [3, 2, -5, 1], [6, -6, 4, -4]], ml_dtypes.int4)
    weight = helper.make_tensor("w", TP.INT4, w.shape, w.astype(np.int8).ravel().tolist())
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "s"], ["dw"], axis=0),
        helper.make_node("MatMul", ["x", "dw"], ["y"]),
    ]
    inits = [weight, numpy_helper.from_array(np.array([0.5, 0.25, 2], np.float32), "s")]
    model = _model(nodes, [_vi("x", TP.FLOAT, ["n", 3])], [_vi("y", TP.FLOAT, ["n", 4])], 21, inits)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    _same_as_ort(model, {"x": x})


def test_types_tcc_lacks_are_named():
    model = _round_trip(TP.FLOAT6E2M3)
    with pytest.raises(FrontendError, match="Cast.*FLOAT6E2M3"):
        from_onnx(model)
