"""ONNX elementwise converters: opset forms, attributes and optional operands, checked against
onnxruntime (or numpy where onnxruntime lacks the opset)."""

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from tcc.frontend.onnx import from_onnx
from tcc.ir.errors import FrontendError
from tcc.ir.expr import Var
from tcc.ir.interp import run
from tests.helpers import assert_matches_ort, call_ops, node_model, onnx_model, value_info

# Compare with onnxruntime at these tolerances unless a test says otherwise.
_check_against_ort = partial(assert_matches_ort, rtol=1e-6, atol=1e-7)


def _x(*shape, dtype=np.float32):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize(
    "op_type, attrs",
    [
        ("Sigmoid", {}),
        ("Erf", {}),
        ("Softplus", {}),
        ("Softsign", {}),
        ("Round", {}),
        ("Sign", {}),
        ("LeakyRelu", {"alpha": 0.3}),
        ("Elu", {"alpha": 0.7}),
        ("Selu", {"alpha": 1.5, "gamma": 2.0}),
        ("Celu", {"alpha": 2.0}),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
        ("HardSwish", {}),
        ("ThresholdedRelu", {"alpha": 0.2}),
        ("Shrink", {"lambd": 0.6, "bias": 0.1}),
        ("Mish", {}),
    ],
)
def test_unary_ops_and_their_attributes(op_type, attrs):
    feeds = {"x": _x(3, 4) * 3}
    _check_against_ort(node_model(op_type, feeds, opset=18, **attrs), feeds, rtol=1e-5)


def test_gelu_tanh_approximation_and_unknown_mode():
    feeds = {"x": _x(3, 4)}
    _check_against_ort(node_model("Gelu", feeds, opset=20, approximate="tanh"), feeds, rtol=1e-5)
    with pytest.raises(FrontendError, match="approximate='fast' is not supported"):
        from_onnx(node_model("Gelu", feeds, opset=20, approximate="fast"))


def test_binary_ops_keep_a_symbolic_batch_dimension():
    m = onnx_model(
        [
            helper.make_node("Mul", ["x", "y"], ["z"]),
            helper.make_node("Greater", ["z", "y"], ["c"]),
        ],
        [value_info("x", TP.FLOAT, ["n", 4]), value_info("y", TP.FLOAT, [4])],
        [value_info("c", TP.BOOL, None)],
    )
    mod = _check_against_ort(m, {"x": _x(5, 4), "y": _x(4)})
    out = mod["main"].bindings[-1].var.type
    assert out.dtype == "bool" and isinstance(out.shape[0], Var)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.float16])
def test_arithmetic_keeps_the_operand_dtype(dtype):
    rng = np.random.default_rng(1)
    feeds = {"a": rng.integers(-100, 100, (3, 4)).astype(dtype)}
    feeds["b"] = rng.integers(1, 100, (4,)).astype(dtype)
    for op_type in ("Add", "Sub", "Mul", "Div"):
        _check_against_ort(node_model(op_type, feeds, opset=14), feeds, rtol=1e-3)


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod(fmod):
    feeds = {"a": np.array([5, -5, 5, -5, 7], np.int32), "b": np.array([3, 3, -3, -3, 7], np.int32)}
    _check_against_ort(node_model("Mod", feeds, fmod=fmod), feeds)


def test_pow_with_an_integer_exponent():
    feeds = {"a": _x(2, 3), "b": np.array([2, 3, 1], np.int64)}
    _check_against_ort(node_model("Pow", feeds, opset=15), feeds, rtol=1e-5)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift(direction):
    feeds = {"a": np.array([1, 16, 255], np.uint8), "b": np.array([1, 2, 3], np.uint8)}
    _check_against_ort(node_model("BitShift", feeds, direction=direction), feeds)


def test_bitshift_rejects_an_unknown_direction():
    feeds = {"a": np.array([1], np.uint8), "b": np.array([1], np.uint8)}
    with pytest.raises(FrontendError, match="direction='UP' is not supported"):
        from_onnx(node_model("BitShift", feeds, direction="UP"))


def test_logic_bitwise_and_predicates():
    rng = np.random.default_rng(2)
    bools = {"a": rng.random((3, 4)) > 0.5, "b": rng.random((4,)) > 0.5}
    for op_type in ("And", "Or", "Xor"):
        _check_against_ort(node_model(op_type, bools), bools)
    ints = {"a": rng.integers(0, 255, (3, 4)).astype(np.int32), "b": np.int32([7, 8, 9, 10])}
    for op_type in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        _check_against_ort(node_model(op_type, ints, opset=18), ints)
    x = {"x": np.array([1.0, np.inf, -np.inf, np.nan], np.float32)}
    _check_against_ort(node_model("IsInf", x, detect_positive=0), x)
    _check_against_ort(node_model("IsNaN", x), x)


def test_where_and_prelu_broadcast():
    feeds = {"c": np.array([True, False, True]), "a": _x(2, 3), "b": _x(3)}
    _check_against_ort(node_model("Where", feeds), feeds)
    feeds = {"x": _x(2, 3, 4), "s": _x(3, 1)}
    _check_against_ort(node_model("PRelu", feeds), feeds)


@pytest.mark.parametrize("op_type", ["Max", "Min", "Sum", "Mean"])
def test_variadic_ops_broadcast_every_input(op_type):
    feeds = {"a": _x(2, 3), "b": _x(3) + 1, "c": _x(1, 1) - 1}
    _check_against_ort(node_model(op_type, feeds), feeds, rtol=1e-6)
    one = {"a": _x(2, 3)}
    _check_against_ort(node_model(op_type, one), one)


def test_clip_bounds_as_attributes_and_as_optional_inputs():
    feeds = {"x": _x(3, 4) * 2}
    _check_against_ort(node_model("Clip", feeds, opset=6, min=-0.5), feeds)
    m = onnx_model(
        [helper.make_node("Clip", ["x", "", "hi"], ["y"])],
        [value_info("x", TP.INT8, [4]), value_info("hi", TP.INT8, [])],
        [value_info("y", TP.INT8, None)],
    )
    _check_against_ort(m, {"x": np.int8([-100, 0, 5, 100]), "hi": np.array(6, np.int8)})


def test_cast_castlike_and_bitcast():
    feeds = {"x": np.array([-1.7, 0.0, 2.5, 300.0], np.float32)}
    for to in (TP.INT32, TP.UINT8, TP.BOOL, TP.FLOAT16, TP.DOUBLE):
        _check_against_ort(node_model("Cast", feeds, to=to), feeds)
    like = {"x": feeds["x"], "t": np.zeros((), np.float16)}
    _check_against_ort(node_model("CastLike", like, opset=15), like)
    mod = from_onnx(node_model("BitCast", {"x": feeds["x"]}, opset=26, to=TP.INT32))
    np.testing.assert_array_equal(run(mod, feeds)[0], feeds["x"].view(np.int32))


def test_cast_before_opset_6_names_the_type():
    feeds = {"x": np.array([1.5, -2.5], np.float32)}
    mod = from_onnx(node_model("Cast", feeds, opset=1, to="INT32"))
    np.testing.assert_array_equal(run(mod, feeds)[0], np.int32([1, -2]))


def test_cast_to_an_unsupported_type_names_it():
    feeds = {"x": _x(2)}
    with pytest.raises(FrontendError, match="Cast.*FLOAT6E2M3"):
        from_onnx(node_model("Cast", feeds, opset=19, to=TP.FLOAT6E2M3))
    with pytest.raises(FrontendError, match="string conversions are not supported"):
        from_onnx(node_model("Cast", feeds, to=TP.STRING))


def test_legacy_broadcast_aligns_a_constant_at_axis():
    bias = helper.make_tensor("b", TP.FLOAT, [3], [1.0, 2.0, 3.0])
    feeds = {"x": _x(2, 3, 4)}
    mod = from_onnx(node_model("Add", feeds, opset=6, initializers=[bias], broadcast=1, axis=1))
    want = feeds["x"] + np.float32([1, 2, 3]).reshape(3, 1)
    np.testing.assert_array_equal(run(mod, feeds)[0], want)


def test_legacy_broadcast_of_a_run_time_operand_at_axis_is_an_error():
    feeds = {"x": _x(2, 3, 4), "b": _x(3)}
    with pytest.raises(FrontendError, match="broadcast=1 with axis=1"):
        from_onnx(node_model("Mul", feeds, opset=6, broadcast=1, axis=1))


def test_dropout_in_inference_returns_the_input_and_a_full_mask():
    feeds = {"x": _x(2, 3)}
    r = helper.make_tensor("r", TP.FLOAT, [], [0.5])
    t = helper.make_tensor("t", TP.BOOL, [], [False])
    m = node_model("Dropout", feeds, outputs=2, opset=13, initializers=[r, t])
    mod = _check_against_ort(m, feeds)
    assert "full_like" in call_ops(mod)


def test_dropout_training_mode_is_an_error_unless_known_false():
    feeds = {"x": _x(2, 3), "r": np.float32(0.5), "t": np.bool_(True)}
    with pytest.raises(FrontendError, match="training_mode is a run-time input"):
        from_onnx(node_model("Dropout", feeds, opset=13))


def test_old_dropout_mask_has_the_data_dtype():
    feeds = {"x": _x(2, 3)}
    mod = from_onnx(node_model("Dropout", feeds, outputs=2, opset=7, ratio=0.3))
    y, mask = run(mod, feeds)
    np.testing.assert_array_equal(y, feeds["x"])
    assert mask.dtype == np.float32 and (mask == 1).all()


def test_identity_adds_no_operation():
    m = onnx_model(
        [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Exp", ["i"], ["y"])],
        [value_info("x", TP.FLOAT, [3])],
        [value_info("y", TP.FLOAT, None)],
    )
    assert call_ops(_check_against_ort(m, {"x": _x(3)})) == ["exp"]


def test_swiglu_is_swish_times_the_value():
    feeds = {"a": _x(2, 4), "b": _x(2, 4) + 1}
    mod = from_onnx(node_model("SwiGLU", feeds, opset=28, alpha=1.5))
    a, b = feeds["a"], feeds["b"]
    want = a / (1 + np.exp(-1.5 * a)) * b
    np.testing.assert_allclose(run(mod, feeds)[0], want, rtol=1e-6)
    with pytest.raises(FrontendError, match="must have the same shape"):
        from_onnx(node_model("SwiGLU", {"a": _x(2, 4), "b": _x(4)}, opset=28))
