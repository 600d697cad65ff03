"""Loop programs (te computes) of the reduction, softmax, normalization and depth/space ops:
each PrimFunc, run by the reference evaluator, computes what the op's numpy reference does,
over the attribute variants and dtypes; shapes stay symbolic; the text round-trips; calls a
loop program does not cover stay op calls."""

import numpy as np
import pytest

from tcc.ir.expr import Var, evaluate, free_vars
from tcc.ir.graph import TensorType
from tcc.ir.module import IRModule
from tcc.ir.ops import OPS
from tcc.ir.ops._util import spatial_params
from tcc.ir.ops.reduce import REDUCTIONS
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.ir.tir_eval import run_prim_func
from tcc.lower.legalize import op_prim_func
from tests.helpers import assert_close, assert_compute_matches_ref, ref

RNG = np.random.default_rng(7)
N = Var("n")


def randn(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def randi(*shape, lo=-9, hi=10, dtype="int32"):
    return RNG.integers(lo, hi, shape).astype(dtype)


def check(op, *arrays, tol=1e-5, **attrs):
    assert_compute_matches_ref(op, *arrays, rtol=tol, atol=tol, **attrs)


# ---------------------------------------------------------------------------------------------
# reduce_*

AXES = [([1], True), ([0, 2], False), ([-1], False), (None, True), (None, False), ([], True)]
FLOAT_REDUCTIONS = sorted(REDUCTIONS - {"reduce_log_sum"})


@pytest.mark.parametrize("axes, keepdims", AXES)
@pytest.mark.parametrize("op", FLOAT_REDUCTIONS)
def test_reduce_float32(op, axes, keepdims):
    check(op, randn(2, 3, 4), axes=axes, keepdims=keepdims)


@pytest.mark.parametrize("axes, keepdims", AXES[:3])
def test_reduce_log_sum_float32(axes, keepdims):
    check("reduce_log_sum", np.abs(randn(2, 3, 4)) + 0.1, axes=axes, keepdims=keepdims)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "int8"])
@pytest.mark.parametrize("op", sorted(REDUCTIONS - {"reduce_log_sum_exp"}))
def test_reduce_integers(op, dtype):
    lo = 0 if dtype == "uint8" or op == "reduce_log_sum" else -9
    x = randi(3, 4, lo=lo if op != "reduce_log_sum" else 1, dtype=dtype)
    check(op, x, tol=0, axes=[1], keepdims=False)  # truncated means, wrapping int8 sums


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_reduce_log_sum_exp_integers(dtype):
    check(
        "reduce_log_sum_exp", randi(3, 4, lo=-3, hi=4, dtype=dtype), tol=0, axes=[0], keepdims=True
    )


@pytest.mark.parametrize(
    "op", ["reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_mean", "reduce_l1"]
)
def test_reduce_bool(op):
    x = RNG.random((3, 4)) > 0.6
    x[0] = False
    x[1] = True
    check(op, x, tol=0, axes=[1], keepdims=True)


@pytest.mark.parametrize("op", FLOAT_REDUCTIONS)
def test_reduce_float16_accumulates_in_float32(op):
    x = (RNG.random((3, 4)) + 0.5).astype("float16")
    check(op, x, tol=2e-3, axes=[1], keepdims=False)


@pytest.mark.parametrize("op", ["reduce_max", "reduce_min", "reduce_sum", "reduce_log_sum_exp"])
def test_reduce_propagates_nan_and_inf(op):
    x = randn(3, 4)
    x[0, 1] = np.nan
    x[1, 2] = np.inf
    x[2, :] = -np.inf
    check(op, x, axes=[1], keepdims=False)


def test_reduce_int_extremes_start_from_the_dtype_limits():
    x = np.array([[-(2**31), -5], [7, 2**31 - 1]], "int32")
    for op in ("reduce_max", "reduce_min"):
        check(op, x, tol=0, axes=[1], keepdims=False)


def test_reduce_with_axes_operand_has_no_loop_program():
    t = TensorType((3, 4), "float32")
    assert (
        op_prim_func("reduce_sum", [t, TensorType((1,), "int64")], {"axes": None, "keepdims": True})
        is None
    )


# ---------------------------------------------------------------------------------------------
# argmax / argmin


@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("axis, keepdims", [(0, True), (1, False), (-1, True)])
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_extremum_ties(op, axis, keepdims, last):
    x = randi(3, 4, 5, lo=-2, hi=3).astype("float32")  # many ties
    check(op, x, tol=0, axis=axis, keepdims=keepdims, select_last_index=last)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "bool", "float16"])
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_extremum_dtypes(op, dtype):
    x = randi(4, 5, lo=0, hi=3).astype(dtype)
    for last in (False, True):
        check(op, x, tol=0, axis=1, keepdims=False, select_last_index=last)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_extremum_picks_nan(op):
    x = randn(3, 5)
    x[0, 1] = x[0, 3] = np.nan
    x[2, 4] = np.nan
    for last in (False, True):
        check(op, x, tol=0, axis=1, keepdims=False, select_last_index=last)


# ---------------------------------------------------------------------------------------------
# scans


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_scan_float32(op, axis, exclusive, reverse):
    check(op, randn(2, 3, 4), axis=axis, exclusive=exclusive, reverse=reverse)


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool", "float16"])
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_scan_dtypes(op, dtype):
    x = randi(3, 5, lo=-2, hi=3).astype(dtype)
    for exclusive in (False, True):
        for reverse in (False, True):
            check(op, x, tol=0, axis=1, exclusive=exclusive, reverse=reverse)


def test_scan_with_axis_operand_has_no_loop_program():
    types = [TensorType((3, 4), "float32"), TensorType((), "int64")]
    attrs = {"axis": 0, "exclusive": False, "reverse": False}
    assert op_prim_func("cumsum", types, attrs) is None


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis", [0, 1])
def test_topk_orders_as_the_stable_sort_does(largest, axis):
    """Ties at the lower index first, NaN the largest value, -0 equal to 0."""
    x = np.array([[1.0, np.nan, 3.0, 1.0, -0.0], [0.0, 2.0, np.nan, np.nan, 2.0],
                  [5.0, -1.0, 3.0, 3.0, 0.0]], np.float32)
    k = 2 if axis == 0 else 4
    assert_compute_matches_ref("topk", x, k=k, axis=axis, largest=largest, rtol=0, atol=0)
    ints = randi(3, 6)
    assert_compute_matches_ref("topk", ints, k=3, axis=1, largest=largest, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# softmax family, losses, lp / mean-variance normalization


@pytest.mark.parametrize("axes", [[-1], [0], [1, 2], [0, 1, 2], []])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "hardmax"])
def test_softmax_family(op, axes):
    check(op, randn(2, 3, 4), axes=axes)


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "hardmax"])
def test_softmax_family_float16(op):
    check(op, randn(3, 6, dtype="float16"), tol=2e-3, axes=[-1])


@pytest.mark.filterwarnings("ignore:invalid value")
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_infinities(op):
    x = randn(3, 4)
    x[0, 1] = np.inf
    x[1, :] = -np.inf
    x[2, 2] = -np.inf
    check(op, x, axes=[1])


def test_hardmax_first_maximum_of_the_block_and_nan():
    x = randi(2, 3, 4, lo=0, hi=2).astype("float32")
    check("hardmax", x, tol=0, axes=[1, 2])
    x[1, 2, 0] = x[1, 0, 3] = np.nan
    check("hardmax", x, tol=0, axes=[1, 2])


@pytest.mark.parametrize("ignore_index", [None, 1, -1])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nll_loss(reduction, weighted, ignore_index):
    x = randn(3, 4, 2)
    target = randi(3, 2, lo=0, hi=4, dtype="int64")
    target[0, 0] = 1
    target[2, 1] = -1  # a negative class counts from the end, as numpy indexes
    w = np.abs(randn(4)) if weighted else None
    check("nll_loss", x, target, w, reduction=reduction, ignore_index=ignore_index)


def test_nll_loss_int32_target_and_float16():
    x, target = randn(4, 3, dtype="float16"), randi(4, lo=0, hi=3)
    check("nll_loss", x, target, tol=2e-3, reduction="mean", ignore_index=2)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, -1])
def test_lp_normalize(axis, p):
    x = randn(3, 4)
    x[:, 0] = 0
    x[0, :] = 0
    check("lp_normalize", x, axis=axis, p=p)
    check("lp_normalize", x.astype("float16"), tol=2e-3, axis=axis, p=p)


def test_lp_normalize_integers_have_no_loop_program():
    assert op_prim_func("lp_normalize", [TensorType((3, 4), "int32")], {"axis": -1, "p": 2}) is None


@pytest.mark.parametrize("axes", [[0, 2, 3], [1], [0, 1, 2, 3]])
def test_mean_variance_normalize(axes):
    x = randn(2, 3, 2, 2)
    check("mean_variance_normalize", x, tol=1e-4, axes=axes)
    check("mean_variance_normalize", x.astype("float16"), tol=1e-2, axes=axes)
    check("mean_variance_normalize", randi(2, 3, 2, 2, dtype="int64"), tol=0, axes=axes)


# ---------------------------------------------------------------------------------------------
# normalizations

C = 4


def channel(n=C, positive=False, dtype="float32"):
    v = randn(n)
    return (np.abs(v) + 0.5 if positive else v).astype(dtype)


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("float64", 1e-12), ("float16", 2e-3)])
def test_batch_norm(dtype, tol):
    x = randn(2, C, 3, dtype=dtype)
    stats = [channel(dtype=dtype), channel(dtype=dtype), channel(dtype=dtype)]
    check("batch_norm", x, *stats, channel(positive=True, dtype=dtype), tol=tol, epsilon=1e-3)


def test_batch_norm_train():
    x = randn(3, C, 2, 2)
    args = [channel(), channel(), channel(), channel(positive=True)]
    check("batch_norm_train", x, *args, tol=1e-4, epsilon=1e-5, momentum=0.8)


@pytest.mark.parametrize("shape", [(2, C, 3), (1, C, 2, 3)])
def test_instance_norm(shape):
    check("instance_norm", randn(*shape), channel(), channel(), tol=1e-4, epsilon=1e-5)


@pytest.mark.parametrize("axis", [-1, 1, 2, 0])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("op", ["layer_norm", "layer_norm_with_stats"])
def test_layer_norm(op, axis, with_bias):
    x = randn(2, 3, 4)
    scale = randn(*x.shape[axis:])
    bias = randn(*x.shape[axis:]) if with_bias else None
    check(op, x, scale, bias, tol=1e-4, axis=axis, epsilon=1e-5, stash_type="float32")


def test_layer_norm_broadcasts_scale_and_bias():
    x = randn(2, 3, 4)
    check(
        "layer_norm", x, randn(1, 4), randn(4), tol=1e-4, axis=1, epsilon=1e-5, stash_type="float32"
    )


@pytest.mark.parametrize(
    "dtype, stash, tol",
    [("float16", "float32", 2e-3), ("float64", "float32", 1e-12), ("float32", "float64", 1e-5)],
)
@pytest.mark.parametrize("op", ["layer_norm", "layer_norm_with_stats", "rms_norm"])
def test_norm_stash_types(op, dtype, stash, tol):
    x = randn(2, 5, dtype=dtype)
    check(op, x, randn(5, dtype=dtype), tol=tol, axis=-1, epsilon=1e-5, stash_type=stash)


@pytest.mark.parametrize("groups, affine", [(1, False), (2, False), (4, False), (2, True)])
def test_group_norm(groups, affine):
    n = groups if affine else C
    x = randn(2, C, 3)
    attrs = {"num_groups": groups, "epsilon": 1e-5, "group_affine": affine, "stash_type": "float32"}
    check("group_norm", x, channel(n), channel(n), tol=1e-4, **attrs)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_norm(axis):
    x = randn(2, 3, 4)
    check(
        "rms_norm",
        x,
        randn(*x.shape[axis:]),
        tol=1e-5,
        axis=axis,
        epsilon=1e-5,
        stash_type="float32",
    )


@pytest.mark.parametrize("size", [1, 2, 3, 5, 9])
def test_lrn(size):
    check("lrn", randn(2, 5, 3), size=size, alpha=1e-2, beta=0.75, bias=1.5)


def test_lrn_float16():
    check(
        "lrn", randn(1, 4, 2, 2, dtype="float16"), tol=2e-3, size=3, alpha=1e-4, beta=0.75, bias=1.0
    )


def test_integer_normalizations_have_no_loop_program():
    t = TensorType((2, C, 3), "int32")
    assert op_prim_func("lrn", [t], {"size": 3, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}) is None


# ---------------------------------------------------------------------------------------------
# depth <-> space


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
@pytest.mark.parametrize("block", [2, 3])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space_rearrangement(mode, block, dtype):
    b = block
    x = randi(2, 2 * b * b, 2, 3, lo=0, hi=100).astype(dtype)
    check("depth_to_space", x, tol=0, block_size=b, mode=mode)
    y = randi(2, 3, 2 * b, b, lo=0, hi=100).astype(dtype)
    check("space_to_depth", y, tol=0, block_size=b, mode=mode)


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 1, 3], [1, 2, 1, 4], [1, 1, 2, 3, 2]])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid(size, align_corners):
    nd = len(size) - 2
    theta = randn(size[0], nd, nd + 1)
    check("affine_grid", theta, tol=1e-6, size=size, align_corners=align_corners)
    check("affine_grid", theta.astype("float64"), tol=1e-12, size=size, align_corners=align_corners)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample(mode, padding_mode, align_corners):
    """Grid points inside, on the border of and well outside [-1, 1] (mirrored several times
    with reflection padding), in 2-D, and in 3-D for the cheaper modes."""
    grid = RNG.uniform(-3.5, 3.5, (2, 3, 4, 2)).astype("float32")
    grid[0, 0, :2] = [[-1, -1], [1, 1]]
    check("grid_sample", randn(2, 3, 4, 5), grid, tol=1e-5, mode=mode,
          padding_mode=padding_mode, align_corners=align_corners)
    if mode != "cubic":
        grid3 = RNG.uniform(-1.5, 1.5, (1, 2, 3, 2, 3)).astype("float64")
        check("grid_sample", randn(1, 2, 3, 4, 2, dtype="float64"), grid3, tol=1e-12, mode=mode,
              padding_mode=padding_mode, align_corners=align_corners)


@pytest.mark.parametrize("inverse, onesided", [(False, False), (True, False), (False, True),
                                               (True, True)])
@pytest.mark.parametrize("length", [None, 6, 11])
@pytest.mark.parametrize("channels", [1, 2])
def test_dft(inverse, onesided, length, channels):
    """The defining sum against numpy's FFT, along a middle axis, padded or cut to `length`
    (the onesided inverse reads n // 2 + 1 bins of a Hermitian spectrum)."""
    if inverse and onesided and channels == 1:
        return  # irfft reads complex bins
    x = randn(2, 8, 3, channels, dtype="float64")
    check("dft", x, tol=1e-10, length=length, axis=1, inverse=inverse, onesided=onesided)
    check("dft", x.astype("float32"), tol=2e-5, length=length, axis=1, inverse=inverse,
          onesided=onesided)


@pytest.mark.parametrize("onesided", [False, True])
@pytest.mark.parametrize("windowed", [False, True])
@pytest.mark.parametrize("channels", [1, 2])
def test_stft(onesided, windowed, channels):
    x = randn(2, 20, channels, dtype="float64")
    window = randn(6, dtype="float64") if windowed else None
    check("stft", x, window, tol=1e-10, frame_step=3, frame_length=None if windowed else 6,
          onesided=onesided)


@pytest.mark.parametrize("kind", ["hann", "hamming", "blackman"])
@pytest.mark.parametrize("periodic", [False, True])
def test_window(kind, periodic):
    check("window", tol=1e-7, size=9, kind=kind, periodic=periodic, dtype="float32")


@pytest.mark.parametrize("image, block, strides, padding, dilation", [
    ([5, 5], [2, 2], None, None, None),
    ([5, 6], [3, 2], [2, 1], [1, 0, 2, 1], [1, 2]),
    ([7], [3], [2], [1, 1], [2]),
    ([3, 4, 3], [2, 1, 2], None, [0, 1, 0, 1, 0, 1], None),
])
def test_col2im(image, block, strides, padding, dilation):
    nd = len(image)
    s, p, d = spatial_params({"strides": strides, "padding": padding, "dilation": dilation}, nd)
    blocks = [(image[i] + p[i] + p[nd + i] - d[i] * (block[i] - 1) - 1) // s[i] + 1
              for i in range(nd)]
    x = randn(2, 3 * int(np.prod(block)), int(np.prod(blocks)))
    attrs = dict(image_shape=image, block_shape=block, strides=strides, padding=padding,
                 dilation=dilation)
    check("col2im", x, tol=1e-5, **attrs)
    check("col2im", randi(*x.shape), tol=0, **attrs)


def test_affine_grid_with_size_operand_has_no_loop_program():
    types = [TensorType((1, 2, 3), "float32"), TensorType((4,), "int64")]
    assert op_prim_func("affine_grid", types, {"size": None, "align_corners": False}) is None


# ---------------------------------------------------------------------------------------------
# symbolic shapes and text round trip

SYMBOLIC = [
    ("reduce_mean", [(N, 3, 4)], {"axes": [1], "keepdims": False}),
    ("reduce_log_sum_exp", [(N, 3)], {"axes": [1], "keepdims": True}),
    ("argmin", [(N, 3)], {"axis": 1, "keepdims": True, "select_last_index": True}),
    ("cumsum", [(N, 4)], {"axis": 0, "exclusive": True, "reverse": True}),
    ("softmax", [(N, 5)], {"axes": [0, 1]}),
    ("hardmax", [(2, N, 3)], {"axes": [1, 2]}),
    ("lp_normalize", [(N, 3)], {"axis": 0, "p": 2}),
    (
        "layer_norm_with_stats",
        [(N, 4), (4,)],
        {"axis": -1, "epsilon": 1e-5, "stash_type": "float32"},
    ),
    (
        "group_norm",
        [(N, 4, 3), (4,), (4,)],
        {"num_groups": 2, "epsilon": 1e-5, "group_affine": False, "stash_type": "float32"},
    ),
    ("lrn", [(1, N, 3)], {"size": 3, "alpha": 1e-3, "beta": 0.75, "bias": 1.0}),
    ("depth_to_space", [(N, 8, 2, 2)], {"block_size": 2, "mode": "DCR"}),
    ("space_to_depth", [(2, 1, N, 4)], {"block_size": 2, "mode": "CRD"}),
    ("affine_grid", [(N, 2, 3)], {"size": [1, 1, 2, 3], "align_corners": True}),
    ("dft", [(2, N, 2)], {"length": None, "axis": 1, "inverse": True, "onesided": False}),
    ("grid_sample", [(N, 2, 4, 5), (N, 3, 3, 2)],
     {"mode": "cubic", "padding_mode": "reflection", "align_corners": False}),
]


def _symbolic_func(op, shapes, attrs):
    return op_prim_func(op, [TensorType(s, "float32") for s in shapes], attrs)


@pytest.mark.parametrize("op, shapes, attrs", SYMBOLIC, ids=[c[0] for c in SYMBOLIC])
def test_symbolic_shapes_stay_symbolic(op, shapes, attrs):
    func = _symbolic_func(op, shapes, attrs)
    outs = func.params[len(shapes) :]
    assert all(N in free_vars(list(o.shape)) for o in outs if o.shape)
    for n in (2, 4):
        arrays = [randn(*[n if d is N else d for d in s]) for s in shapes]
        want = ref(op, *arrays, **attrs)
        want = list(want) if isinstance(want, (tuple, list)) else [want]
        got = [np.zeros([evaluate(d, {N: n}) for d in o.shape], o.dtype) for o in outs]
        run_prim_func(func, arrays + got)
        assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op, shapes, attrs", SYMBOLIC, ids=[c[0] for c in SYMBOLIC])
def test_prim_func_text_round_trips(op, shapes, attrs):
    mod = IRModule({"f": _symbolic_func(op, shapes, attrs)})
    assert structural_equal(parse_module(print_module(mod)), mod)


def test_every_op_of_the_families_but_sampling_has_a_compute():
    families = {"reduce", "softmax", "norm"}
    missing = sorted(
        name
        for name, op in OPS.items()
        if op.compute is None and op.ref.__module__.rsplit(".", 1)[-1] in families
    )
    assert missing == []
    image = ("depth_to_space", "space_to_depth", "affine_grid")
    assert all(OPS[name].compute is not None for name in image)
