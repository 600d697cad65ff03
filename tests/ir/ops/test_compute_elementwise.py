"""Loop programs of the elementwise, cast and generate families: each op's te program, run by
tcc.ir.tir_eval, computes what its numpy reference computes (dtype, rounding, NaN and integer
edge cases included), keeps shapes symbolic, and prints and parses back unchanged."""

import numpy as np
import pytest

from tcc.ir.builder import FunctionBuilder
from tcc.ir.expr import Var
from tcc.ir.graph import TensorType
from tcc.ir.module import IRModule
from tcc.ir.ops import OPS
from tcc.ir.ops import elementwise as ew
from tcc.ir.ops.registry import get_op, normalize_attrs
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.ir.tir_eval import run_prim_func
from tcc.lower.legalize import legalize, op_prim_func, unlegalized_ops
from tests.helpers import assert_close, ref, run_compute
from tests.helpers import assert_compute_matches_ref as _matches_ref

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

RNG = np.random.default_rng(7)
N, M = Var("n"), Var("m")
# Specials every float test meets: signed zeros, infinities, NaN.
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0]


def floats(shape=(2, 3), dtype="float32", special=False):
    x = np.asarray(RNG.standard_normal(shape) * 2)
    if special:
        flat = x.reshape(-1)
        flat[: len(SPECIAL)] = SPECIAL[: flat.size]
    return np.asarray(x.astype(dtype))


def ints(shape=(2, 3), dtype="int32", lo=-20, hi=20):
    info = np.iinfo(dtype)
    values = RNG.integers(max(lo, info.min), min(hi, info.max), shape, endpoint=True)
    return np.asarray(values).astype(dtype)


def bools(shape=(2, 3)):
    return RNG.integers(0, 2, shape).astype(bool)


def tol(dtype):
    if dtype == "float16":
        return {"rtol": 1e-3, "atol": 1e-3}
    if dtype in ("float32", "float64"):
        return {"rtol": 1e-5, "atol": 1e-6}
    return {"rtol": 0, "atol": 0}


def prim_func(op, *types, **attrs):
    opdef = get_op(op)
    return op_prim_func(op, list(types), normalize_attrs(opdef, attrs))


def assert_compute_matches_ref(op, *arrays, rtol, atol, **attrs):
    """tests.helpers' check, which turns 0-d operands into 1-d ones; those run here instead."""
    if not any(a is not None and np.ndim(a) == 0 for a in arrays):
        return _matches_ref(op, *arrays, rtol=rtol, atol=atol, **attrs)
    opdef = get_op(op)
    types = [None if a is None else TensorType(a.shape, a.dtype.name) for a in arrays]
    out_type = opdef.infer(types, normalize_attrs(opdef, attrs))
    out = np.zeros(out_type.shape, out_type.dtype)
    run_prim_func(prim_func(op, *types, **attrs), [a for a in arrays if a is not None] + [out])
    assert_close(out, ref(op, *arrays, **attrs), rtol=rtol, atol=atol)


# -- unary float math and activations -----------------------------------------------------------

FLOAT_UNARY = sorted(
    (ew.UNARY_MATH | ew.ACTIVATIONS | {"is_nan", "is_inf"})
    - {"neg", "abs", "sign", "relu", "prelu", "shrink"}
)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("op", FLOAT_UNARY)
def test_unary_float_ops_match_reference(op, dtype):
    x = floats((3, 4), dtype, special=True)
    assert_compute_matches_ref(op, x, **tol(dtype))


@pytest.mark.parametrize(
    "op, attrs",
    [
        ("leaky_relu", {"alpha": 0.3}),
        ("elu", {"alpha": 0.5}),
        ("selu", {"alpha": 2.0, "gamma": 3.0}),
        ("celu", {"alpha": 2.0}),
        ("hard_sigmoid", {"alpha": 0.4, "beta": 0.1}),
        ("thresholded_relu", {"alpha": -0.5}),
        ("swish", {"alpha": 1.7}),
        ("gelu", {"approximate": "tanh"}),
        ("is_inf", {"detect_positive": False}),
        ("is_inf", {"detect_negative": False}),
        ("is_inf", {"detect_positive": False, "detect_negative": False}),
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_unary_attribute_variants(op, attrs, dtype):
    assert_compute_matches_ref(op, floats((3, 4), dtype, special=True), **tol(dtype), **attrs)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "int32", "int64", "uint8"])
@pytest.mark.parametrize(
    "attrs", [{}, {"lambd": 1.0, "bias": 1.5}, {"lambd": 2, "bias": 1}, {"lambd": 0.0}]
)
def test_shrink_on_floats_and_ints(dtype, attrs):
    x = floats((3, 4), dtype, special=True) if "float" in dtype else ints((3, 4), dtype, -5, 5)
    assert_compute_matches_ref("shrink", x, **tol(dtype), **attrs)


@pytest.mark.parametrize("op", ["neg", "abs", "sign", "relu"])
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "float32", "float16"])
def test_signed_unary_ops(op, dtype):
    if "float" in dtype:
        x = floats((3, 4), dtype, special=True)
    else:  # the type's minimum wraps under neg and abs, as numpy's does
        x = ints((3, 4), dtype)
        x.reshape(-1)[0] = np.iinfo(dtype).min
    assert_compute_matches_ref(op, x, **tol(dtype))


@pytest.mark.parametrize(
    "op, arrays",
    [
        ("sign", [[-0.0, 0.0, 2.0]]),
        ("neg", [[0.0, -0.0, 1.0]]),
        ("floor_mod", [[0.0, -0.0, 4.0, -4.0], [-2.0, 2.0, -2.0, 2.0]]),
        ("relu", [[-0.0, 0.0, -1.0]]),
    ],
)
def test_signed_zeros_match_reference(op, arrays):
    """allclose cannot tell -0.0 from 0.0; a later division by them can."""
    arrays = [np.array(a, "float32") for a in arrays]
    (got,) = run_compute(op, *arrays)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(ref(op, *arrays)))


@pytest.mark.parametrize("op", ["abs", "sign"])
@pytest.mark.parametrize("dtype", ["uint8", "uint64"])
def test_unsigned_unary_ops(op, dtype):
    assert_compute_matches_ref(op, ints((2, 3), dtype, 0, 255), **tol(dtype))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "uint64"])
def test_bitwise_not(dtype):
    x = ints((2, 4), dtype, -128, 255)
    x.reshape(-1)[0] = np.iinfo(dtype).min
    x.reshape(-1)[1] = np.iinfo(dtype).max
    assert_compute_matches_ref("bitwise_not", x, rtol=0, atol=0)


def test_logical_not():
    assert_compute_matches_ref("logical_not", bools(), rtol=0, atol=0)


# -- binary ops ---------------------------------------------------------------------------------

ARITH = ["add", "sub", "mul", "div", "floor_mod", "trunc_mod", "maximum", "minimum"]
SHAPES = [((2, 3), (3,)), ((2, 1), (1, 3)), ((), (2, 3)), ((2, 3), (2, 3))]


def operands(dtype, shapes, nonzero=False):
    a_shape, b_shape = shapes
    if "float" in dtype:
        return floats(a_shape, dtype, special=True), floats(b_shape, dtype, special=True)
    lo = 0 if dtype.startswith("u") else -30
    a, b = ints(a_shape, dtype, lo, 30), ints(b_shape, dtype, lo, 5)
    return a, b


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize(
    "dtype", ["float32", "float16", "float64", "int32", "int8", "uint8", "int64"]
)
@pytest.mark.parametrize("op", ARITH)
def test_arithmetic_matches_reference(op, dtype, shapes):
    a, b = operands(dtype, shapes)
    assert_compute_matches_ref(op, a, b, **tol(dtype))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("op", ["div", "floor_mod", "trunc_mod"])
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
def test_integer_division_edges(op, dtype):
    """Every sign combination, division by zero (0, as numpy) and by -1 of the minimum."""
    info = np.iinfo(dtype)
    vals = [0, 1, 7, info.max] + ([-1, -7, info.min] if info.min < 0 else [255 % (info.max + 1)])
    divs = [1, 2, 3, 0] + ([-1, -2, -3] if info.min < 0 else [info.max])
    a = np.array([[v] * len(divs) for v in vals], dtype)
    b = np.array(divs, dtype)
    assert_compute_matches_ref(op, a, b, rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("op", ["floor_mod", "trunc_mod", "div"])
def test_float_division_edges(op):
    vals = np.array([7.5, -7.5, 0.0, -0.0, np.inf, np.nan, 3.0, -3.0], "float32")
    divs = np.array([2.0, -2.0, 0.0, np.inf, -np.inf, 1.5, -1.5, np.nan], "float32")
    assert_compute_matches_ref(op, vals[:, None], divs[None, :], rtol=1e-6, atol=0)


@pytest.mark.parametrize("op", sorted(ew.COMPARISONS))
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8", "int64"])
def test_comparisons(op, dtype):
    a, b = operands(dtype, ((2, 3), (3,)))
    assert_compute_matches_ref(op, a, b, rtol=0, atol=0)


def test_equal_on_bools():
    assert_compute_matches_ref("equal", bools((2, 3)), bools((3,)), rtol=0, atol=0)


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_logical_binary(op):
    assert_compute_matches_ref(op, bools((4, 1)), bools((1, 3)), rtol=0, atol=0)


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "uint64"])
def test_bitwise_binary(op, dtype):
    info = np.iinfo(dtype)
    a = np.array(
        [0, 1, -1 % (info.max + 1) if info.min == 0 else -1, info.min, info.max, 90], dtype
    )
    b = RNG.integers(info.min, info.max, (2, 1), endpoint=True, dtype=dtype)
    assert_compute_matches_ref(op, a, b, rtol=0, atol=0)


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise_binary_on_bools(op):
    assert_compute_matches_ref(op, bools((4, 1)), bools((1, 3)), rtol=0, atol=0)


@pytest.mark.parametrize("op", ["left_shift", "right_shift"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "uint64"])
def test_shifts_with_out_of_range_amounts(op, dtype):
    info, bits = np.iinfo(dtype), np.dtype(dtype).itemsize * 8
    x = np.array([[0], [1], [5], [info.max], [info.min], [info.max // 3]], dtype)
    amounts = [0, 1, 3, bits - 1, bits, bits + 2] + ([-1] if info.min < 0 else [])
    assert_compute_matches_ref(op, x, np.array(amounts, dtype), rtol=0, atol=0)
    if info.min < 0:
        assert_compute_matches_ref(op, -x[1:3], np.array(amounts, dtype), rtol=0, atol=0)


@pytest.mark.parametrize(
    "base, exponent",
    [
        ("float32", "float32"),
        ("float32", "int32"),
        ("float32", "int64"),
        ("float16", "float16"),
        ("float16", "int8"),
        ("float64", "float32"),
        ("int32", "float32"),
        ("int8", "float32"),
        ("int64", "int64"),
        ("int32", "int32"),
    ],
)
def test_pow_dtype_pairs(base, exponent):
    if "float" in base:
        b = np.abs(floats((2, 3), base)) + np.array(0.5, base)
    else:
        b = ints((2, 3), base, -6, 6)
    e = floats((3,), exponent) if "float" in exponent else ints((3,), exponent, 0, 4)
    assert_compute_matches_ref("pow", b, e, **tol(base if "float" in base else "float32"))


def test_pow_integer_negative_exponents_go_through_float64():
    b = np.array([[1], [-1], [2], [-3], [5]], "int32")
    e = np.array([-2, -1, 0, 1, 3], "int32")
    assert_compute_matches_ref("pow", b, e, rtol=0, atol=0)


# -- prelu, clip, where ---------------------------------------------------------------------------


@pytest.mark.parametrize("slope_shape", [(3, 1), (4,), (1,), (2, 3, 4)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_prelu(slope_shape, dtype):
    if "float" in dtype:
        x, slope = floats((2, 3, 4), dtype, special=True), floats(slope_shape, dtype)
    else:
        x, slope = ints((2, 3, 4), dtype), ints(slope_shape, dtype, -3, 3)
    assert_compute_matches_ref("prelu", x, slope, **tol(dtype))


@pytest.mark.parametrize("bounds", ["none", "lo", "hi", "both", "crossed", "broadcast"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8"])
def test_clip(bounds, dtype):
    x = floats((2, 5), dtype, special=True) if "float" in dtype else ints((2, 5), dtype, 0, 40)
    lo, hi = np.array(1, dtype), np.array(3, dtype)
    args = {
        "none": (x,),
        "lo": (x, lo),
        "hi": (x, None, hi),
        "both": (x, lo, hi),
        "crossed": (x, hi, lo),  # min wins: every value becomes lo
        "broadcast": (x, np.arange(5).astype(dtype), np.array([[2], [30]], dtype)),
    }[bounds]
    assert_compute_matches_ref("clip", *args, **tol(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool"])
def test_where_broadcasts_all_three(dtype):
    cond = bools((2, 1, 3))
    if dtype == "bool":
        a, b = bools((4, 1)), bools((3,))
    elif "float" in dtype:
        a, b = floats((4, 1), dtype, special=True), floats((3,), dtype)
    else:
        a, b = ints((4, 1), dtype), ints((3,), dtype)
    assert_compute_matches_ref("where", cond, a, b, rtol=0, atol=0)


# -- cast -----------------------------------------------------------------------------------------

CAST_DTYPES = ["bool", "int8", "uint8", "int32", "int64", "uint64", "float16", "float32", "float64"]


@pytest.mark.parametrize("dst", CAST_DTYPES)
@pytest.mark.parametrize("src", CAST_DTYPES)
def test_cast_between_ordinary_dtypes(src, dst):
    if src == "bool":
        x = bools((2, 4))
    elif "float" in src and "int" in dst:
        # within the target's range (float-to-int is undefined outside it), with fractions
        x = floats((2, 4), "float64") * 20
        x = (np.abs(x) if dst.startswith("u") else x).astype(src)
    elif "float" in src:
        x = floats((2, 4), src, special=True)
    else:
        x = ints((2, 4), src, -100, 100)
    assert_compute_matches_ref(
        "cast", x, dtype=dst, rtol=1e-3 if "float16" in (src, dst) else 0, atol=0
    )


@pytest.mark.parametrize("src, dst", [("float32", "complex64"), ("complex64", "float32")])
def test_cast_without_loop_program_stays_an_op_call(src, dst):
    assert prim_func("cast", TensorType((2,), src), dtype=dst) is None


# -- generate -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attrs",
    [
        {"stop": 5},
        {"start": 2, "stop": 11, "step": 3, "dtype": "int32"},
        {"start": 10, "stop": -3, "step": -4},
        {"start": 1, "stop": 3, "step": 1, "dtype": "float16"},
        {"start": 0.5, "stop": 3.2, "step": 0.3, "dtype": "float32"},
        {"start": -1.0, "stop": 1.0, "step": 0.25, "dtype": "float64"},
        {"start": 0.5, "stop": 4, "step": 1, "dtype": "int64"},
        {"start": -2, "stop": 2, "dtype": "bool"},
        {"start": 3, "stop": 1},
    ],
)
def test_arange(attrs):
    assert_compute_matches_ref("arange", rtol=0, atol=0, **attrs)


@pytest.mark.parametrize(
    "shape, value, dtype",
    [([2, 3], 2.5, "float32"), ([4], 1 / 3, "float16"), ([2, 2], 7, "int8"), ([3], 2.9, "int32"),
     ([2], np.nan, "float64"), ([], -1, "int64"), ([2], 1, "bool"), ([0, 2], 1.0, "float32")],
)  # fmt: skip
def test_full(shape, value, dtype):
    assert_compute_matches_ref("full", shape=shape, value=value, dtype=dtype, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [None, "float16", "int32", "bool"])
def test_full_like(dtype):
    x = floats((2, 3))
    assert_compute_matches_ref("full_like", x, value=-1.5, dtype=dtype, rtol=0, atol=0)


@pytest.mark.parametrize("rows, cols, k", [(3, 3, 0), (2, 4, 1), (4, 2, -1), (3, 3, 5), (2, 3, -2)])
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_eye(rows, cols, k, dtype):
    assert_compute_matches_ref("eye", rows=rows, cols=cols, k=k, dtype=dtype, rtol=0, atol=0)


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("k", [None, -1, 0, 2, -5])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_trilu(upper, k, dtype):
    x = floats((2, 3, 4)) if dtype == "float32" else ints((2, 3, 4), "int32").astype(dtype)
    # k is a 1-element tensor (a 0-d one also works; see test_trilu_scalar_k)
    kk = None if k is None else np.array([k], "int64")
    assert_compute_matches_ref("trilu", x, kk, upper=upper, rtol=0, atol=0)


def test_trilu_scalar_k():
    x, k = floats((3, 4)), np.array(1, "int32")
    func = prim_func("trilu", TensorType((3, 4), "float32"), TensorType((), "int32"), upper=False)
    out = np.zeros((3, 4), "float32")
    run_prim_func(func, [x, k, out])
    np.testing.assert_array_equal(out, np.tril(x, 1))


@pytest.mark.parametrize(
    "dims, scalar, dtype", [([2, 3, 5], False, "int64"), ([7], True, "int32"), ([], False, "int64"),
                            ([4], False, "int32")]
)  # fmt: skip
def test_shape_to_tensor_static(dims, scalar, dtype):
    assert_compute_matches_ref(
        "shape_to_tensor", dims=dims, scalar=scalar, dtype=dtype, rtol=0, atol=0
    )


# -- symbolic shapes ------------------------------------------------------------------------------


def run(func, *arrays):
    run_prim_func(func, list(arrays))
    return arrays[-1]


def test_binary_keeps_size_variable_and_runs_at_every_size():
    func = prim_func("add", TensorType((N, 3), "float32"), TensorType((3,), "float32"))
    assert func.params[-1].shape[0] is N
    for n in (1, 4):
        a, b = floats((n, 3)), floats((3,))
        np.testing.assert_allclose(run(func, a, b, np.zeros((n, 3), "float32")), a + b)


def test_symbolic_dims_that_are_one_at_run_time_broadcast():
    func = prim_func("mul", TensorType((N, 3), "float32"), TensorType((M, 3), "float32"))
    for n, m in [(1, 4), (4, 1), (4, 4)]:
        a, b = floats((n, 3)), floats((m, 3))
        out = run(func, a, b, np.zeros((max(n, m), 3), "float32"))
        np.testing.assert_allclose(out, a * b)
    func = prim_func("prelu", TensorType((2, 4), "float32"), TensorType((N,), "float32"))
    for n in (1, 4):
        x, s = floats((2, 4)), floats((n,))
        np.testing.assert_allclose(
            run(func, x, s, np.zeros((2, 4), "float32")), np.where(x < 0, x * s, x)
        )


def test_symbolic_generators():
    func = prim_func("arange", stop=N, dtype="float32")
    assert func.params[0].shape == (N,)
    np.testing.assert_array_equal(run(func, np.zeros(5, "float32")), np.arange(5, dtype="float32"))
    func = prim_func("full", shape=[N, 2], value=3, dtype="int32")
    np.testing.assert_array_equal(run(func, np.zeros((3, 2), "int32")), np.full((3, 2), 3))
    func = prim_func("eye", rows=N, cols=M, k=1, dtype="float32")
    np.testing.assert_array_equal(run(func, np.zeros((3, 4), "float32")), np.eye(3, 4, 1))
    func = prim_func("trilu", TensorType((N, M), "float32"))
    x = floats((3, 2))
    np.testing.assert_array_equal(run(func, x, np.zeros((3, 2), "float32")), np.triu(x))


@pytest.mark.parametrize(
    "op, attrs",
    [
        ("arange", {"start": 1, "stop": N}),  # length n - 1: no buffer dim binds n
        ("arange", {"start": 0, "stop": N, "step": 2}),
        ("full", {"shape": [N * 2]}),
        ("shape_to_tensor", {"dims": [N, 3]}),
    ],
)
def test_generators_take_unbindable_size_variables_as_scalar_arguments(op, attrs):
    """No buffer dimension is n alone, so the kernel takes n as a scalar argument after its
    buffers, and computes the reference at every n."""
    func = prim_func(op, **attrs)
    assert func.params[-1] is N
    for n in (3, 8):
        concrete = {k: [d if isinstance(d, int) else n * 2 for d in v] if k == "shape"
                    else [n if d is N else d for d in v] if k == "dims"
                    else n if v is N else v for k, v in attrs.items()}
        want = ref(op, **concrete)
        out = np.zeros(want.shape, want.dtype)
        run_prim_func(func, [out, n])
        np.testing.assert_array_equal(out, want)


def test_dtypes_without_loop_program():
    e4m3 = TensorType((2,), "float8_e4m3fn")  # a storage type: cast it to compute with it
    assert prim_func("add", e4m3, e4m3) is None
    assert prim_func("equal", TensorType((2,), "string"), TensorType((2,), "string")) is None
    assert prim_func("full", shape=[2], value=1.0, dtype="float8_e5m2") is None


# -- text round trip and coverage ---------------------------------------------------------------

F32, I32 = TensorType((2, 3), "float32"), TensorType((2, 3), "int32")
ROUND_TRIP = [
    ("gelu", [TensorType((N, 3), "float16")], {}),
    ("sigmoid", [F32], {}),
    ("div", [I32, TensorType((3,), "int32")], {}),
    ("floor_mod", [F32, F32], {}),
    ("bitwise_xor", [TensorType((2,), "int8")] * 2, {}),
    ("right_shift", [TensorType((2,), "int16")] * 2, {}),
    ("pow", [F32, I32], {}),
    ("clip", [F32, None, TensorType((), "float32")], {}),
    ("where", [TensorType((3,), "bool"), F32, F32], {}),
    ("is_inf", [F32], {"detect_negative": False}),
    ("cast", [F32], {"dtype": "bool"}),
    ("arange", [], {"stop": N, "dtype": "float32"}),
    ("arange", [], {"start": 0.5, "stop": 3, "step": 0.5}),
    ("full", [], {"shape": [2], "value": np.nan}),
    ("trilu", [F32, TensorType((1,), "int64")], {"upper": False}),
    ("shape_to_tensor", [], {"dims": [2, 3]}),
]


@pytest.mark.parametrize("op, types, attrs", ROUND_TRIP, ids=[r[0] for r in ROUND_TRIP])
def test_printed_prim_func_parses_back_equal(op, types, attrs):
    func = prim_func(op, *types, **attrs)
    text = print_module(IRModule({"f": func}))
    back = parse_module(text)
    assert structural_equal(back["f"], func), text


FAMILY = (
    ew.UNARY_MATH | ew.ACTIVATIONS | ew.ARITHMETIC | ew.COMPARISONS | ew.LOGICAL | ew.BITWISE
    | ew.PREDICATES | {"clip", "where", "cast", "full", "full_like", "arange", "eye", "trilu",
                       "shape_to_tensor"}
)  # fmt: skip


def test_legalize_turns_the_family_into_call_tir_and_leaves_the_rest():
    bb = FunctionBuilder()
    x = bb.param("x", TensorType((N, 4), "float32"))
    h = bb.param("h", TensorType((4,), "string"))
    y = bb.emit("gelu", bb.emit("add", x, bb.emit("arange", stop=4, dtype="float32")))
    mask = bb.emit("cast", bb.emit("greater", y, bb.emit("full_like", y, value=0.0)), dtype="int32")
    z = bb.emit("equal", h, h)  # strings: no loop program
    mod = IRModule({"main": bb.finish([mask, z], ["mask", "z"])})
    out = legalize(mod)
    assert [type(b.value).__name__ for b in out["main"].bindings].count("CallTIR") == 6
    assert unlegalized_ops(out) == {"equal": 1}


def test_every_op_of_the_family_has_a_loop_program():
    assert not [op for op in sorted(FAMILY) if OPS[op].compute is None]
