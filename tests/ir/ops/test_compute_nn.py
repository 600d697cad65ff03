"""Loop programs (te computes) of the contraction, convolution and pooling ops: each one,
run by the reference PrimFunc evaluator, equals the op's numpy reference over its attribute
variants and dtypes; shapes stay symbolic; uncovered cases stay op calls; the PrimFuncs
round-trip through the IR text."""

import numpy as np
import pytest

from tcc.ir.dtype import to_numpy
from tcc.ir.expr import Var, evaluate
from tcc.ir.graph import TensorType
from tcc.ir.module import IRModule
from tcc.ir.ops import OPS
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.ir.tir_eval import run_prim_func
from tcc.lower.legalize import op_prim_func
from tests.helpers import assert_close, assert_compute_matches_ref, ref, run_compute

rng = np.random.default_rng(0)
n, m, h, w = Var("n"), Var("m"), Var("h"), Var("w")


def rand(*shape, dtype="float32"):
    if np.dtype(dtype).kind in "iu":
        lo, hi = (0, 255) if np.dtype(dtype).kind == "u" else (-9, 9)
        return rng.integers(lo, hi, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# Float sums run in a different order than numpy's (BLAS, pairwise); integers are exact.
TOL = {"float32": 1e-5, "float16": 2e-3, "float64": 1e-12, "int32": 0, "int64": 0}


def check(op, *arrays, **attrs):
    dtype = next(a.dtype.name for a in arrays if a is not None)
    assert_compute_matches_ref(op, *arrays, rtol=TOL[dtype], atol=TOL[dtype], **attrs)


def run_symbolic(op, types, arrays, **attrs):
    """The op's PrimFunc built for symbolic `types`, run on concrete `arrays`."""
    func = op_prim_func(op, types, attrs)
    env = {}
    for t, a in zip(types, arrays):
        env.update({d: s for d, s in zip(t.shape, a.shape) if isinstance(d, Var)})
    out = func.params[-1]
    y = np.zeros([evaluate(d, env) for d in out.shape], to_numpy(out.dtype))
    run_prim_func(func, [*arrays, y])
    return func, y


# ---------------------------------------------------------------------------------------------
# matmul, gemm, einsum


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((3, 4), (4, 5)),
        ((2, 3, 4), (4, 5)),
        ((3, 4), (2, 4, 5)),
        ((2, 1, 3, 4), (3, 4, 2)),
        ((4,), (2, 4, 5)),
        ((2, 3, 4), (4,)),
        ((4,), (4,)),
    ],
)
def test_matmul_shapes(a_shape, b_shape):
    check("matmul", rand(*a_shape), rand(*b_shape))


@pytest.mark.parametrize("dtype", ["float16", "float64", "int32", "int64"])
def test_matmul_dtypes(dtype):
    check("matmul", rand(2, 3, 4, dtype=dtype), rand(4, 5, dtype=dtype))


def test_matmul_float16_accumulates_in_float32_exactly():
    a, b = rand(3, 40, dtype="float16"), rand(40, 4, dtype="float16")
    assert_compute_matches_ref("matmul", a, b, rtol=0, atol=0)


def test_matmul_int32_wraps_like_numpy():
    a = np.full((2, 3), 2**30, "int32")
    assert_compute_matches_ref("matmul", a, np.full((3, 2), 3, "int32"), rtol=0, atol=0)


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((1, 3, 4), (2, 4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (1, 4, 5))],
)
def test_matmul_symbolic_batch_broadcasts_at_run_time(a_shape, b_shape):
    types = [TensorType((n, 3, 4), "float32"), TensorType((m, 4, 5), "float32")]
    a, b = rand(*a_shape), rand(*b_shape)
    func, y = run_symbolic("matmul", types, [a, b])
    assert not isinstance(func.params[-1].shape[0], int)  # max(n, m): known when it runs
    np.testing.assert_allclose(y, ref("matmul", a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("c_shape", [None, (5,), (3, 1), (3, 5), (1, 1)])
def test_gemm_variants(trans_a, trans_b, c_shape):
    a = rand(4, 3) if trans_a else rand(3, 4)
    b = rand(5, 4) if trans_b else rand(4, 5)
    c = None if c_shape is None else rand(*c_shape)
    check("gemm", a, b, c, alpha=0.5, beta=2.0, trans_a=trans_a, trans_b=trans_b)


@pytest.mark.parametrize("alpha, beta", [(1.0, 1.0), (1.0, 0.0), (-0.25, 0.5)])
@pytest.mark.parametrize("dtype", ["float16", "int32", "int64"])
def test_gemm_dtypes(dtype, alpha, beta):
    a, b, c = rand(3, 4, dtype=dtype), rand(4, 5, dtype=dtype), rand(5, dtype=dtype)
    check("gemm", a, b, c, alpha=alpha, beta=beta)


def test_gemm_beta_zero_ignores_nan_in_c():
    c = np.full((3, 5), np.nan, "float32")
    check("gemm", rand(3, 4), rand(4, 5), c, beta=0.0)


@pytest.mark.parametrize(
    "equation, shapes",
    [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("ij,jk", [(2, 3), (3, 4)]),
        ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
        ("ii->i", [(3, 3)]),
        ("ij->", [(2, 3)]),
        ("i,j->ij", [(3,), (4,)]),
        ("...ij->...ji", [(2, 3, 4)]),
        ("...ij,...jk", [(2, 3, 4), (1, 4, 2)]),
        ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 2)]),
    ],
)
def test_einsum(equation, shapes):
    check("einsum", *[rand(*s) for s in shapes], equation=equation)


def test_einsum_integer():
    check("einsum", rand(2, 3, dtype="int32"), rand(3, 4, dtype="int32"), equation="ij,jk->ik")


# Quantization parameters are 1-element 1-D arrays: run_compute passes operands through
# np.ascontiguousarray, which turns a 0-d array into a 1-d one.
def u8(*shape):
    return rng.integers(0, 255, shape).astype("uint8")


@pytest.mark.parametrize(
    "a_zp, b_zp",
    [(None, None), (np.array([3], "uint8"), None), ("row", "col"), (None, np.array([7], "uint8"))],
)
def test_matmul_integer(a_zp, b_zp):
    a_zp = u8(3) if isinstance(a_zp, str) else a_zp
    b_zp = u8(5) if isinstance(b_zp, str) else b_zp
    args = [u8(2, 3, 4), u8(4, 5), a_zp, b_zp]
    while args[-1] is None:
        args.pop()
    assert_compute_matches_ref("matmul_integer", *args, rtol=0, atol=0)


def test_matmul_integer_int8():
    a, b = rand(3, 4, dtype="int8"), rand(4, 5, dtype="int8")
    assert_compute_matches_ref("matmul_integer", a, b, np.array([-2], "int8"), rtol=0, atol=0)


@pytest.mark.parametrize("per_axis", [False, True])
def test_qlinear_matmul(per_axis):
    a_scale = rng.uniform(0.01, 0.05, 3 if per_axis else 1).astype("float32")
    b_scale = rng.uniform(0.01, 0.05, 5 if per_axis else 1).astype("float32")
    b_zp = u8(5) if per_axis else np.array([9], "uint8")
    args = [u8(3, 4), a_scale, np.array([3], "uint8"), u8(4, 5), b_scale, b_zp]
    args += [np.array([0.2], "float32"), np.array([100], "uint8")]
    assert_compute_matches_ref("qlinear_matmul", *args, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# convolutions


CONV_CASES = {
    "conv1d": [
        dict(x=(1, 2, 7), w=(3, 2, 3)),
        dict(x=(2, 2, 7), w=(3, 2, 3), padding=[1, 2], strides=[2]),
        dict(x=(1, 4, 8), w=(4, 1, 2), groups=4, dilation=[3], padding=[2, 0]),
    ],
    "conv2d": [
        dict(x=(1, 2, 5, 5), w=(3, 2, 3, 3), padding=[1, 1, 1, 1]),
        dict(x=(1, 4, 5, 6), w=(4, 2, 3, 2), padding=[1, 0, 2, 1], groups=2, dilation=[2, 1]),
        dict(x=(1, 2, 6, 6), w=(2, 2, 2, 2), strides=[2, 3], padding=[0, 1, 1, 0]),
        dict(x=(1, 2, 6, 6), w=(2, 2, 2, 2), padding=[-1, 0, 0, -1]),
    ],
    "conv3d": [
        dict(x=(1, 2, 3, 4, 3), w=(2, 1, 2, 2, 2), padding=[1, 0, 0, 0, 1, 0], groups=2),
    ],
}
CONV_PARAMS = [(op, case) for op, cases in CONV_CASES.items() for case in cases]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("op, case", CONV_PARAMS)
def test_conv(op, case, bias):
    attrs = dict(case)
    x, wt = rand(*attrs.pop("x")), rand(*attrs.pop("w"))
    check(op, x, wt, rand(wt.shape[0]) if bias else None, **attrs)


@pytest.mark.parametrize("dtype", ["float16", "float64", "int32"])
def test_conv_dtypes(dtype):
    x, wt, b = rand(1, 2, 5, 5, dtype=dtype), rand(2, 2, 2, 2, dtype=dtype), rand(2, dtype=dtype)
    check("conv2d", x, wt, b, padding=[1, 1, 0, 0])


def test_conv_symbolic_same_padding():
    """Pads that depend on the input size (auto_pad SAME on a symbolic input) stay symbolic."""
    size, k, s = h, 3, 2
    total = ((size + s - 1) // s - 1) * s + k - size
    pb, pe = total // 2, total - total // 2
    attrs = dict(strides=[s, s], padding=[pb, pb, pe, pe], dilation=None, groups=1)
    types = [TensorType((n, 2, h, h), "float32"), TensorType((3, 2, 3, 3), "float32")]
    for size_value in (5, 6):
        x, wt = rand(1, 2, size_value, size_value), rand(3, 2, 3, 3)
        env = {h: size_value}
        concrete = dict(attrs, padding=[evaluate(p, env) for p in attrs["padding"]])
        func, y = run_symbolic("conv2d", types, [x, wt], **attrs)
        assert func.params[-1].shape[0] is n
        np.testing.assert_allclose(y, ref("conv2d", x, wt, None, **concrete), rtol=1e-5, atol=1e-5)


TRANSPOSE_CASES = [
    ("conv1d_transpose", dict(x=(1, 2, 4), w=(2, 3, 3))),
    ("conv1d_transpose", dict(x=(1, 2, 4), w=(2, 3, 3), strides=[2], padding=[1, 0])),
    ("conv1d_transpose", dict(x=(1, 2, 4), w=(2, 2, 2), strides=[3], output_padding=[2])),
    ("conv2d_transpose", dict(x=(1, 4, 3, 3), w=(4, 1, 2, 3), strides=[2, 1], groups=2)),
    (
        "conv2d_transpose",
        dict(x=(1, 2, 3, 2), w=(2, 2, 2, 2), dilation=[1, 2], padding=[0, 1, 1, 0]),
    ),
    ("conv3d_transpose", dict(x=(1, 1, 2, 2, 2), w=(1, 2, 2, 2, 2), strides=[2, 1, 1])),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("op, case", TRANSPOSE_CASES)
def test_conv_transpose(op, case, bias):
    attrs = dict(case)
    x, wt = rand(*attrs.pop("x")), rand(*attrs.pop("w"))
    b = rand(wt.shape[1] * attrs.get("groups", 1)) if bias else None
    check(op, x, wt, b, **attrs)


def test_conv_transpose_float16():
    x, wt = rand(1, 2, 3, 3, dtype="float16"), rand(2, 2, 2, 2, dtype="float16")
    check("conv2d_transpose", x, wt, rand(2, dtype="float16"), strides=[2, 2])


@pytest.mark.parametrize("zero_points", ["none", "scalar", "per_channel"])
def test_conv_integer(zero_points):
    x, wt = u8(1, 2, 5, 5), u8(3, 2, 2, 2)
    zps = {
        "none": [],
        "scalar": [np.array([3], "uint8"), np.array([5], "uint8")],
        "per_channel": [np.array([3], "uint8"), u8(3)],
    }[zero_points]
    assert_compute_matches_ref("conv_integer", x, wt, *zps, rtol=0, atol=0, padding=[1, 1, 0, 0])


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(per_channel, bias):
    x, wt = u8(1, 2, 5, 5), u8(3, 2, 2, 2)
    w_scale = rng.uniform(0.01, 0.03, 3 if per_channel else 1).astype("float32")
    w_zp = u8(3) if per_channel else np.array([4], "uint8")
    b = rng.integers(-500, 500, 3).astype("int32") if bias else None
    args = [x, np.array([0.02], "float32"), np.array([3], "uint8"), wt, w_scale, w_zp]
    args += [np.array([0.25], "float32"), np.array([100], "uint8"), b]
    attrs = dict(padding=[1, 1, 0, 0], strides=[2, 1])
    got = run_compute("qlinear_conv", *args, **attrs)
    # The reference reads x_scale/y_scale with float(), which needs 0-d arrays.
    args0 = [
        a.reshape(()) if a is not None and a.shape == (1,) and a is not w_zp else a for a in args
    ]
    assert_close(got, [ref("qlinear_conv", *args0, **attrs)], rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# pools


POOL_CASES = [
    (1, dict(kernel=[3])),
    (1, dict(kernel=[3], strides=[2], padding=[1, 1], dilation=[2])),
    (2, dict(kernel=[3, 2], strides=[2, 2], padding=[1, 0, 1, 1])),
    (2, dict(kernel=[2, 2], strides=[2, 2])),
    (3, dict(kernel=[2, 2, 2], padding=[1, 0, 0, 0, 1, 0], strides=[1, 2, 1])),
]
SPATIAL = {1: (7,), 2: (5, 6), 3: (3, 4, 3)}


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("nd, attrs", POOL_CASES)
def test_max_pool(nd, attrs, ceil_mode):
    check(f"max_pool{nd}d", rand(1, 2, *SPATIAL[nd]), ceil_mode=ceil_mode, **attrs)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("nd, attrs", POOL_CASES)
def test_avg_pool(nd, attrs, ceil_mode, count_include_pad):
    x = rand(1, 2, *SPATIAL[nd])
    check(f"avg_pool{nd}d", x, ceil_mode=ceil_mode, count_include_pad=count_include_pad, **attrs)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("nd, attrs", POOL_CASES[1:3])
def test_lp_pool(nd, attrs, p):
    check(f"lp_pool{nd}d", rand(1, 2, *SPATIAL[nd]), ceil_mode=True, p=p, **attrs)


@pytest.mark.parametrize("dtype", ["float16", "int32", "int64"])
def test_pool_dtypes(dtype):
    x = rand(1, 2, 5, 5, dtype=dtype)
    attrs = dict(kernel=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])
    check("max_pool2d", x, **attrs)
    check("avg_pool2d", x, count_include_pad=False, **attrs)


def test_max_pool_propagates_nan():
    x = rand(1, 1, 7)
    x[0, 0, 3] = np.nan
    assert_compute_matches_ref("max_pool1d", x, rtol=0, atol=0, kernel=[3], padding=[1, 1])


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("nd, attrs", POOL_CASES)
def test_max_pool_with_indices(nd, attrs, ceil_mode, storage_order):
    x = rand(2, 2, *SPATIAL[nd])
    check("max_pool_with_indices", x, ceil_mode=ceil_mode, storage_order=storage_order, **attrs)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_max_pool_with_indices_picks_the_first_maximum(dtype):
    x = rng.integers(-2, 2, (1, 2, 4, 4)).astype(dtype)  # many ties
    if dtype == "float32":
        x[0, 0, 1, 1] = np.nan
    attrs = dict(kernel=[2, 2], padding=[1, 1, 0, 0], storage_order=0)
    assert_compute_matches_ref("max_pool_with_indices", x, rtol=0, atol=0, **attrs)


def test_avg_pool_symbolic_size():
    types = [TensorType((n, 2, h, w), "float32")]
    attrs = dict(kernel=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1], dilation=None)
    attrs.update(ceil_mode=True, count_include_pad=False)
    for shape in [(1, 2, 5, 6), (2, 2, 4, 4)]:
        x = rand(*shape)
        func, y = run_symbolic("avg_pool2d", types, [x], **attrs)
        np.testing.assert_allclose(y, ref("avg_pool2d", x, **attrs), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 2, 3), (2, 3, 2, 2, 2), (2, 3)])
@pytest.mark.parametrize("op", ["global_avg_pool", "global_max_pool", "global_lp_pool"])
def test_global_pools(op, shape):
    check(op, rand(*shape))


@pytest.mark.parametrize("dtype", ["float16", "int32"])
def test_global_pool_dtypes(dtype):
    check("global_avg_pool", rand(2, 3, 3, 3, dtype=dtype))
    check("global_max_pool", rand(2, 3, 3, 3, dtype=dtype))


def test_global_lp_pool_p3():
    check("global_lp_pool", rand(2, 3, 4), p=3)


def test_global_avg_pool_symbolic():
    types = [TensorType((n, 3, h, w), "float32")]
    x = rand(2, 3, 4, 5)
    func, y = run_symbolic("global_avg_pool", types, [x])
    assert func.params[-1].shape == (n, 3, 1, 1)
    np.testing.assert_allclose(y, ref("global_avg_pool", x), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# what has no loop program, and the text round trip


@pytest.mark.parametrize(
    "op, types, attrs",
    [
        ("matmul", [TensorType((2, 3), "bool"), TensorType((3, 2), "bool")], {}),
        ("lp_pool1d", [TensorType((1, 1, 4), "int32")], dict(kernel=[2], p=2)),
        ("einsum", [TensorType((2, 3), "float16")], dict(equation="ij->i")),
        ("det", [TensorType((3, 3), "float32")], {}),
        (
            "max_unpool",
            [TensorType((1, 1, 2), "float32"), TensorType((1, 1, 2), "int64")],
            dict(kernel=[2]),
        ),
    ],
)
def test_uncovered_calls_have_no_prim_func(op, types, attrs):
    from tcc.ir.ops.registry import normalize_attrs

    assert op_prim_func(op, types, normalize_attrs(OPS[op], attrs)) is None


ROUND_TRIP = [
    ("matmul", [TensorType((n, 3, 4), "float16"), TensorType((4, m), "float16")], {}),
    (
        "gemm",
        [TensorType((n, 4), "float32"), TensorType((5, 4), "float32"), TensorType((5,), "float32")],
        dict(alpha=0.5, trans_b=True),
    ),
    (
        "conv2d",
        [
            TensorType((n, 2, h, w), "float32"),
            TensorType((4, 2, 3, 3), "float32"),
            TensorType((4,), "float32"),
        ],
        dict(padding=[1, 1, 1, 1], strides=[2, 2]),
    ),
    (
        "conv2d_transpose",
        [TensorType((n, 2, h, w), "float32"), TensorType((2, 3, 2, 2), "float32")],
        dict(strides=[2, 2]),
    ),
    (
        "avg_pool2d",
        [TensorType((n, 2, h, w), "float32")],
        dict(kernel=[3, 3], padding=[1, 1, 1, 1], ceil_mode=True),
    ),
    ("max_pool2d", [TensorType((n, 2, h, w), "float32")], dict(kernel=[2, 2], strides=[2, 2])),
    ("global_avg_pool", [TensorType((n, 2, h, w), "float32")], {}),
]


@pytest.mark.parametrize("op, types, attrs", ROUND_TRIP, ids=[c[0] for c in ROUND_TRIP])
def test_prim_func_text_round_trip(op, types, attrs):
    from tcc.ir.ops.registry import normalize_attrs

    func = op_prim_func(op, types, normalize_attrs(OPS[op], attrs))
    mod = IRModule({"f": func})
    assert structural_equal(parse_module(print_module(mod)), mod)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("groups, offset_groups, masked, biased", [
    (1, 1, False, False), (2, 2, True, True), (1, 2, True, False)])
def test_deform_conv(dtype, groups, offset_groups, masked, biased):
    """Offsets that move taps between pixels, onto the border and out of the image."""
    x = rand(2, 4, 5, 6, dtype=dtype)
    weight = rand(6, 4 // groups, 3, 2, dtype=dtype)
    attrs = dict(strides=[2, 1], padding=[1, 0, 1, 1], dilation=[1, 2], groups=groups,
                 offset_groups=offset_groups)
    oh, ow = (5 + 2 - 2 - 1) // 2 + 1, (6 + 1 - 2 - 1) + 1
    offset = (rng.standard_normal((2, offset_groups * 6 * 2, oh, ow)) * 2).astype(dtype)
    offset[0, 0, 0, 0] = -40.0  # far outside
    mask = rand(2, offset_groups * 6, oh, ow, dtype=dtype) if masked else None
    bias = rand(6, dtype=dtype) if biased else None
    check("deform_conv", x, weight, offset, bias, mask, **attrs)
