"""Elementwise ops: symbolic shape/dtype inference, operand checks and numpy references."""

import math

import numpy as np
import pytest

from tcc.ir.errors import ShapeError
from tcc.ir.expr import Var, prove_equal
from tcc.ir.graph import TensorType
from tcc.ir.ops import OPS, Pattern
from tcc.ir.ops import elementwise as ew
from tests.helpers import infer, run_op

N = Var("n")


def _f32(*values):
    return np.array(values, np.float32)


# -- the registry ----------------------------------------------------------------------------


def test_groups_name_registered_ops_with_elementwise_patterns():
    groups = [ew.UNARY_MATH, ew.ACTIVATIONS, ew.ARITHMETIC, ew.COMPARISONS, ew.LOGICAL]
    groups += [ew.BITWISE, ew.PREDICATES, ew.COMMUTATIVE]
    for name in frozenset().union(*groups):
        assert OPS[name].pattern in (Pattern.ELEMWISE, Pattern.BROADCAST), name
    assert ew.COMMUTATIVE <= ew.ARITHMETIC | ew.COMPARISONS | ew.LOGICAL | ew.BITWISE


# -- inference -------------------------------------------------------------------------------


def test_binary_broadcasts_symbolic_shapes():
    t = infer("add", TensorType((N, 1, 4), "float32"), TensorType((3, 1), "float32"))
    assert t.dtype == "float32" and t.shape[1:] == (3, 4) and prove_equal(t.shape[0], N)


def test_comparisons_return_bool_with_the_broadcast_shape():
    t = infer("less_equal", TensorType((N, 4), "int8"), TensorType((4,), "int8"))
    assert t.dtype == "bool" and prove_equal(t.shape[0], N) and t.shape[1] == 4


def test_unary_keeps_shape_and_dtype_and_predicates_give_bool():
    assert infer("exp", TensorType((N, 2), "float16")) == TensorType((N, 2), "float16")
    assert infer("is_nan", TensorType((N,), "float32")) == TensorType((N,), "bool")


def test_pow_result_has_the_base_dtype():
    t = infer("pow", TensorType((N, 3), "int64"), TensorType((), "float32"))
    assert t.dtype == "int64" and prove_equal(t.shape[0], N)


def test_where_broadcasts_all_three_operands():
    t = infer(
        "where",
        TensorType((N, 1), "bool"),
        TensorType((1, 5), "int32"),
        TensorType((), "int32"),
    )
    assert t.dtype == "int32" and prove_equal(t.shape[0], N) and t.shape[1] == 5


def test_cast_and_bitcast_change_only_the_dtype():
    assert infer("cast", TensorType((N,), "float32"), dtype="int8") == TensorType((N,), "int8")
    t = infer("bitcast", TensorType((N, 2), "float32"), dtype="uint32")
    assert t == TensorType((N, 2), "uint32")


def test_clip_bounds_are_optional_operands():
    x = TensorType((N, 3), "float32")
    bound = TensorType((), "float32")
    assert infer("clip", x, None, bound) == x
    assert infer("clip", x) == x


@pytest.mark.parametrize(
    "op, types, attrs, message",
    [
        ("add", [TensorType((2,), "float32"), TensorType((2,), "int32")], {}, "same dtype"),
        ("add", [TensorType((2,), "float32"), TensorType((3,), "float32")], {}, "broadcast"),
        ("sqrt", [TensorType((2,), "int32")], {}, "dtype int32"),
        ("logical_and", [TensorType((2,), "int8"), TensorType((2,), "int8")], {}, "expected"),
        ("where", [TensorType((2,), "int8")] * 3, {}, "condition has dtype int8"),
        ("prelu", [TensorType((2,), "float32"), TensorType((3, 2), "float32")], {}, "slope"),
        ("clip", [TensorType((2,), "float32"), TensorType((4,), "float32")], {}, "min"),
        ("cast", [TensorType((2,), "string")], {"dtype": "float32"}, "string"),
        ("bitcast", [TensorType((2,), "float32")], {"dtype": "int64"}, "same width"),
    ],
)
def test_invalid_operands_raise_shape_errors(op, types, attrs, message):
    with pytest.raises(ShapeError, match=message):
        infer(op, *types, **attrs)


# -- numerics --------------------------------------------------------------------------------


def test_integer_division_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 6], np.int32)
    b = np.array([2, 2, -2, -2, 3], np.int32)
    np.testing.assert_array_equal(run_op("div", a, b), [3, -3, -3, 3, 2])


def test_integer_arithmetic_wraps():
    out = run_op("add", np.array([250], np.uint8), np.array([10], np.uint8))
    assert out.dtype == np.uint8 and out[0] == 4


def test_mod_variants_follow_divisor_or_dividend_sign():
    a, b = np.array([5, -5, 5, -5], np.int64), np.array([3, 3, -3, -3], np.int64)
    np.testing.assert_array_equal(run_op("floor_mod", a, b), [2, 1, -1, -2])
    np.testing.assert_array_equal(run_op("trunc_mod", a, b), [2, -2, 2, -2])


def test_pow_keeps_the_base_dtype_for_mixed_operands():
    out = run_op("pow", np.array([2, 3], np.int32), np.array([0.5, 2.0], np.float32))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [1, 9])
    out = run_op("pow", np.array([2], np.int64), np.array([-1], np.int64))
    np.testing.assert_array_equal(out, [0])


def test_round_is_half_to_even():
    np.testing.assert_array_equal(
        run_op("round", _f32(0.5, 1.5, 2.5, -0.5, -4.5, 2.3)), _f32(0, 2, 2, -0, -4, 2)
    )


def test_shifts_saturate_out_of_range_amounts_to_the_sign_fill():
    x = np.array([-8, 8, -8, 1], np.int8)
    amount = np.array([1, 9, 8, 7], np.int8)
    np.testing.assert_array_equal(run_op("right_shift", x, amount), [-4, 0, -1, 0])
    np.testing.assert_array_equal(run_op("left_shift", x, amount), [-16, 0, 0, -128])


def test_float16_math_stays_float16_and_is_accurate():
    x = np.linspace(-4, 4, 17).astype(np.float16)
    out = run_op("sigmoid", x)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-3)


def test_erf_and_gelu_match_their_formulas():
    x = _f32(-2, -0.5, 0, 0.5, 2)
    erf = np.array([math.erf(v) for v in x.astype(np.float64)])
    np.testing.assert_allclose(run_op("erf", x), erf, rtol=1e-6)
    exact = 0.5 * x * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x.astype(np.float64)]))
    np.testing.assert_allclose(run_op("gelu", x), exact, rtol=1e-6)
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(run_op("gelu", x, approximate="tanh"), tanh, rtol=1e-6)


def test_sigmoid_and_softplus_do_not_overflow():
    x = _f32(-1000, 0, 1000)
    np.testing.assert_array_equal(run_op("sigmoid", x), _f32(0, 0.5, 1))
    np.testing.assert_array_equal(run_op("softplus", x), _f32(0, math.log(2), 1000))


def test_clip_with_min_above_max_gives_max():
    x = _f32(-2, 0, 2)
    np.testing.assert_array_equal(
        run_op("clip", x, np.float32(1), np.float32(-1)), _f32(-1, -1, -1)
    )
    np.testing.assert_array_equal(run_op("clip", x, None, np.float32(1)), _f32(-2, 0, 1))


def test_prelu_broadcasts_the_slope_into_the_input():
    x = np.array([[-1.0, 2.0], [-3.0, -4.0]], np.float32)
    np.testing.assert_array_equal(run_op("prelu", x, _f32(0.5, 0.25)), [[-0.5, 2], [-1.5, -1]])


def test_cast_conversions():
    np.testing.assert_array_equal(run_op("cast", _f32(-1.7, 0, np.nan), dtype="bool"), [1, 0, 1])
    np.testing.assert_array_equal(run_op("cast", np.array([200], np.int16), dtype="int8"), [-56])
    np.testing.assert_array_equal(run_op("cast", _f32(-1.7, 2.9), dtype="int32"), [-1, 2])
    rounded = run_op("cast", _f32(1 + 2**-9, 1 + 3 * 2**-9), dtype="bfloat16")
    np.testing.assert_array_equal(rounded, _f32(1, 1 + 2**-7))


def test_bitcast_reinterprets_bits_including_scalars():
    out = run_op("bitcast", np.float32(1.0), dtype="int32")
    assert out.shape == () and out == 0x3F800000


def test_is_inf_detects_each_sign_on_request():
    x = _f32(-np.inf, 0, np.inf, np.nan)
    np.testing.assert_array_equal(run_op("is_inf", x, detect_positive=False), [1, 0, 0, 0])
    np.testing.assert_array_equal(run_op("is_inf", x), [1, 0, 1, 0])


def test_full_like_fills_the_input_shape():
    out = run_op("full_like", np.zeros((2, 3), np.float32), value=True, dtype="bool")
    assert out.dtype == np.bool_ and out.shape == (2, 3) and out.all()


def test_string_equality():
    a = np.array(["a", "b"], dtype=object)
    np.testing.assert_array_equal(run_op("equal", a, np.array(["a", "c"], dtype=object)), [1, 0])
