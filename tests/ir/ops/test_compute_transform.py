"""Loop programs of the data-movement, slicing, gather and resize ops: each PrimFunc, run by
the reference evaluator, gives exactly what the op's numpy reference gives (these ops only
move values, and resize computes in float64 as its reference does), at static and symbolic
shapes; the printed PrimFuncs parse back."""

import numpy as np
import pytest

from tcc.ir.expr import Var, evaluate
from tcc.ir.graph import TensorType
from tcc.ir.module import IRModule
from tcc.ir.ops.registry import get_op, normalize_attrs
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.ir.tir_eval import run_prim_func
from tcc.lower.legalize import op_prim_func
from tests.helpers import assert_compute_matches_ref, ref

RNG = np.random.default_rng(0)
N, M = Var("n"), Var("m")


def rand(*shape, dtype="float32"):
    if np.issubdtype(np.dtype(dtype), np.integer):
        return RNG.integers(-50, 50, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def exact(op, *arrays, **attrs):
    assert_compute_matches_ref(op, *arrays, rtol=0, atol=0, **attrs)


def run_symbolic(op, types, arrays, attrs, ref_attrs=None):
    """Build the PrimFunc once for symbolic `types`, run it on concrete `arrays` (whose
    shapes bind the size variables) and compare with the reference (`ref_attrs`: the
    attributes with symbolic dimensions evaluated)."""
    func = op_prim_func(op, types, normalize_attrs(get_op(op), attrs))
    assert func is not None
    want = ref(op, *arrays, **(attrs if ref_attrs is None else ref_attrs))
    wants = list(want) if isinstance(want, (list, tuple)) else [want]
    outs = [np.zeros_like(w) for w in wants]
    run_prim_func(func, [a for a in arrays if a is not None] + outs)
    for got, w in zip(outs, wants):
        np.testing.assert_array_equal(got, w)
    return func


def roundtrip(func):
    mod = IRModule({"f": func})
    assert structural_equal(parse_module(print_module(mod)), mod)


DTYPES = ["float32", "int32", "int64", "float16"]

# -- transform ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_identity(dtype):
    exact("identity", rand(2, 3, dtype=dtype))


@pytest.mark.parametrize(
    "shape, target",
    [
        ((2, 3, 4), [6, 4]),
        ((2, 3, 4), [2, -1]),
        ((2, 3, 4), [4, 3, 2]),
        ((2, 3, 4), [24]),
        ((2, 3, 4), [2, 3, 2, 2]),
        ((2, 12), [2, 3, 2, 2]),
        ((1, 1, 1), []),
        ((6,), [1, 2, 1, 3]),
    ],
)
def test_reshape(shape, target):
    exact("reshape", rand(*shape), shape=target)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_dtypes(dtype):
    exact("reshape", rand(3, 4, dtype=dtype), shape=[2, 6])


def test_reshape_symbolic_keeps_shared_axes_and_runs_at_every_size():
    func = run_symbolic(
        "reshape", [TensorType((N, 3, 8), "float32")], [rand(2, 3, 8)], {"shape": [N, 3, 2, 4]},
        {"shape": [2, 3, 2, 4]},
    )  # fmt: skip
    assert isinstance(func.buffers[1].shape[0], Var)
    for n in (1, 3):
        x = rand(n, 3, 8)
        out = np.zeros((n, 3, 2, 4), "float32")
        run_prim_func(func, [x, out])
        np.testing.assert_array_equal(out, x.reshape(n, 3, 2, 4))
    x = rand(3, 4)  # merging into one axis
    run_symbolic("reshape", [TensorType((N, 4), "float32")], [x], {"shape": [-1]}, {"shape": [-1]})


@pytest.mark.parametrize("axes", [None, [1, 2, 0], [0, 2, 1], [-1, 0, 1]])
def test_transpose(axes):
    exact("transpose", rand(2, 3, 4), axes=axes)


@pytest.mark.parametrize("dtype", ["int64", "float16"])
def test_transpose_dtypes(dtype):
    exact("transpose", rand(2, 3, dtype=dtype))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    parts = [rand(2, 3, 2), rand(2, 3, 2), rand(2, 3, 2)]
    exact("concat", *parts, axis=axis)


def test_concat_uneven_single_and_empty_parts():
    exact("concat", rand(2, 1), rand(2, 3), rand(2, 0), rand(2, 2), axis=1)
    exact("concat", rand(3, 2, dtype="int32"), axis=0)


def test_concat_symbolic_extents():
    types = [TensorType((N, 2), "int64"), TensorType((M, 2), "int64")]
    run_symbolic(
        "concat", types, [rand(2, 2, dtype="int64"), rand(3, 2, dtype="int64")], {"axis": 0}
    )


@pytest.mark.parametrize("sizes, axis", [([1, 2], 1), ([2, 0, 1], 0), ([4], -1), ([1, 1, 2], 2)])
def test_split(sizes, axis):
    exact("split", rand(3, 3, 4), sizes=sizes, axis=axis)


def test_split_symbolic():
    run_symbolic(
        "split", [TensorType((2, N), "float32")], [rand(2, 5)], {"sizes": [2, N - 2], "axis": 1},
        {"sizes": [2, 3], "axis": 1},
    )  # fmt: skip


@pytest.mark.parametrize(
    "shape, axes", [((2, 1, 3), [1]), ((1, 3, 1), [0, 2]), ((1, 3, 1), [-1]), ((1, 1, 3, 1), None)]
)
def test_squeeze(shape, axes):
    exact("squeeze", rand(*shape), axes=axes)


@pytest.mark.parametrize("axes", [[0], [1, 3], [-1], [0, 1, 2]])
def test_expand_dims(axes):
    exact("expand_dims", rand(2, 3, dtype="int32"), axes=axes)


@pytest.mark.parametrize(
    "shape, target", [((3, 1), [2, 3, 4]), ((1,), [5]), ((2, 3), [2, 3]), ((1, 3), [4, 2, 3])]
)
def test_broadcast_to(shape, target):
    exact("broadcast_to", rand(*shape), shape=target)


def test_broadcast_to_symbolic_input_axis_that_may_be_one():
    # x's n is 1 or 4 at run time: the loop program must read correctly in both cases
    types = [TensorType((N, 3), "float32")]
    func = op_prim_func("broadcast_to", types, {"shape": [2, 4, 3]})
    for n in (1, 4):
        x, out = rand(n, 3), np.zeros((2, 4, 3), "float32")
        run_prim_func(func, [x, out])
        np.testing.assert_array_equal(out, np.broadcast_to(x, (2, 4, 3)))


@pytest.mark.parametrize("repeats", [[2, 1, 3], [1, 1, 1], [3, 2, 1]])
def test_tile(repeats):
    exact("tile", rand(2, 1, 3, dtype="int64"), repeats=repeats)


def test_tile_symbolic():
    run_symbolic("tile", [TensorType((N, 2), "float32")], [rand(3, 2)], {"repeats": [2, 2]})


def test_transform_prim_funcs_roundtrip():
    types = [TensorType((N, 3), "float32"), TensorType((M, 3), "float32")]
    roundtrip(op_prim_func("concat", types, {"axis": 0}))
    roundtrip(op_prim_func("reshape", [TensorType((N, 6), "float16")], {"shape": [N, 2, 3]}))
    roundtrip(op_prim_func("split", [types[0]], {"sizes": [1, 2], "axis": 1}))


# -- slicing -----------------------------------------------------------------------------------

BIG = 2**31 - 1


@pytest.mark.parametrize(
    "begin, end, axes, strides",
    [
        ([1, -1], [3, -6], [0, 1], [1, -2]),
        ([BIG], [-BIG], [1], [-1]),
        ([-100], [100], [1], [2]),
        ([4], [1], [1], [1]),
        ([0, 1], [2, 4], [-2, -1], [2, 1]),
        ([-2], [-BIG], [0], [-1]),
    ],
)
def test_strided_slice(begin, end, axes, strides):
    exact("strided_slice", rand(3, 5), begin=begin, end=end, axes=axes, strides=strides)


def test_strided_slice_symbolic_negative_step():
    attrs = {"begin": [BIG, 1], "end": [-BIG, BIG], "axes": [0, 1], "strides": [-1, 2]}
    for n in (1, 4):
        run_symbolic(
            "strided_slice", [TensorType((N, 5), "int32")], [rand(n, 5, dtype="int32")], attrs
        )
    attrs = {"begin": [1], "end": [BIG], "axes": [0], "strides": [1]}
    run_symbolic("strided_slice", [TensorType((N, 2), "float32")], [rand(4, 2)], attrs)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 2, 0, 3], [-1, 7, 2, -2], [0, 0, 0, 0], [2, 0, 0, 4]])
def test_pad_modes(mode, pads):
    exact("pad", rand(3, 5), pads=pads, mode=mode)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_modes_on_a_size_one_axis(mode):
    exact("pad", rand(1, 3, dtype="int64"), pads=[2, 1, 3, 2], mode=mode)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pad_constant_fill_value(dtype):
    exact("pad", rand(2, 3, dtype=dtype), np.array([7], dtype), pads=[1, 0, 1, 2])


def test_pad_fill_value_of_another_dtype_is_cast():
    exact("pad", rand(2, 3, dtype="int32"), np.array([2.75], "float32"), pads=[1, 1, 1, 1])


def test_pad_symbolic():
    for mode in ("constant", "reflect", "wrap"):
        run_symbolic(
            "pad",
            [TensorType((N, 3), "float32")],
            [rand(3, 3)],
            {"pads": [1, 0, 2, 1], "mode": mode},
        )


@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1), (2, 0)])
def test_reverse_sequence(batch_axis, time_axis):
    x = rand(4, 3, 3, dtype="int64")
    lens = np.array([4, 0, 2, 3][: x.shape[batch_axis]], "int32")
    exact("reverse_sequence", x, lens, batch_axis=batch_axis, time_axis=time_axis)


@pytest.mark.parametrize(
    "shape, axes", [([7, 1], [0, 1]), ([2, 6], [0, -1]), ([3], [0]), ([4, 2], [1, 0])]
)
def test_center_crop_pad(shape, axes):
    exact("center_crop_pad", rand(4, 3, 2), shape=shape, axes=axes)


def test_center_crop_pad_symbolic_crops_or_pads_at_run_time():
    func = op_prim_func(
        "center_crop_pad", [TensorType((N, 2), "float32")], {"shape": [5], "axes": [0]}
    )
    for n in (2, 5, 8):
        x = rand(n, 2)
        want = ref("center_crop_pad", x, shape=[5], axes=[0])
        out = np.zeros_like(want)
        run_prim_func(func, [x, out])
        np.testing.assert_array_equal(out, want)


def test_slicing_prim_funcs_roundtrip():
    x = [TensorType((N, 5), "float32")]
    roundtrip(op_prim_func("pad", x, {"pads": [1, 0, 2, 1], "mode": "reflect"}))
    roundtrip(op_prim_func("pad", x, {"pads": [1, 0, 2, 1], "mode": "constant"}))
    attrs = {"begin": [BIG], "end": [-BIG], "axes": [0], "strides": [-2]}
    roundtrip(op_prim_func("strided_slice", x, attrs))
    roundtrip(op_prim_func("center_crop_pad", x, {"shape": [4], "axes": [0]}))


# -- gathers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_gather(axis, index_dtype):
    x = rand(3, 4, 5)
    idx = RNG.integers(-3, 3, (2, 2)).astype(index_dtype)
    exact("gather", x, idx, axis=axis)


@pytest.mark.parametrize("dtype", ["int64", "float16"])
def test_gather_scalar_index_and_dtypes(dtype):
    exact("gather", rand(4, 3, dtype=dtype), np.array([2], "int64"), axis=0)
    exact("gather", rand(4, 3, dtype=dtype), np.array([[-1, 0, 1]], "int32"), axis=1)


def test_gather_symbolic_rows():
    types = [TensorType((N, 3), "float32"), TensorType((M,), "int64")]
    run_symbolic("gather", types, [rand(5, 3), np.array([4, 0, -1, 2], "int64")], {"axis": 0})


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_gather_elements(axis):
    x = rand(3, 4, 5)
    idx_shape = [3, 4, 5]
    idx_shape[axis] = 2
    idx = RNG.integers(-3, 3, idx_shape).astype("int64")
    exact("gather_elements", x, idx, axis=axis)


@pytest.mark.parametrize(
    "idx_shape, batch_dims, high",
    [((2, 2), 0, 3), ((2, 3), 0, 3), ((3, 1), 1, 4), ((3, 2, 1), 1, 4), ((3, 4, 2, 1), 2, 5)],
)
def test_gather_nd(idx_shape, batch_dims, high):
    idx = RNG.integers(0, high, idx_shape).astype("int64")
    idx[..., 0] = idx[..., 0] % (3 if batch_dims == 0 else 4 if batch_dims == 1 else 5)
    exact("gather_nd", rand(3, 4, 5, dtype="int32"), idx, batch_dims=batch_dims)


def test_gather_nd_negative_indices():
    exact("gather_nd", rand(3, 4), np.array([[-1, -2], [0, 3]], "int32"))


def test_array_feature_extractor():
    exact("array_feature_extractor", rand(2, 3, 5), np.array([[1, 0], [4, -2]], "int64"))
    exact("array_feature_extractor", rand(5), np.array([1, 3], "int64"))


def test_index_prim_funcs_roundtrip():
    types = [TensorType((N, 3), "float32"), TensorType((M, 2), "int32")]
    roundtrip(op_prim_func("gather", types, {"axis": 0}))
    roundtrip(op_prim_func("gather_nd", [types[0], TensorType((M, 2), "int64")], {"batch_dims": 0}))


# -- resize ------------------------------------------------------------------------------------

CTMS = [
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
    "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize",
]  # fmt: skip
ROI = [0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2]
RESIZES = [
    ([1, 1, 5, 7], [1.0, 1.0, 5 / 3, 7 / 4]),
    ([1, 1, 2, 3], [1.0, 1.0, None, None]),
    ([1, 1, 6, 2], [1.0, 1.0, 2.0, 0.5]),
]


def resize_attrs(ctm, sizes, scales, **kw):
    crop = ctm == "tf_crop_and_resize"
    return dict(
        sizes=sizes, scales=scales, coordinate_transformation_mode=ctm,
        roi=ROI if crop else None, extrapolation_value=-3.0, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("ctm", CTMS)
@pytest.mark.parametrize("sizes, scales", RESIZES)
@pytest.mark.parametrize(
    "nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"]
)
def test_resize_nearest(ctm, sizes, scales, nearest_mode):
    attrs = resize_attrs(ctm, sizes, scales, mode="nearest", nearest_mode=nearest_mode)
    exact("resize", rand(1, 1, 3, 4), **attrs)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("ctm", CTMS)
@pytest.mark.parametrize("sizes, scales", RESIZES)
def test_resize_interpolating(mode, ctm, sizes, scales):
    x = rand(1, 1, 3, 4)
    exact("resize", x, **resize_attrs(ctm, sizes, scales, mode=mode))
    attrs = resize_attrs(ctm, sizes, scales, mode=mode, exclude_outside=True, cubic_coeff_a=-0.5)
    exact("resize", x, **attrs)
    exact("resize", (x * 50).astype("int32"), **resize_attrs(ctm, sizes, scales, mode=mode))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("size", [2, 6])
def test_resize_antialias(mode, size):
    attrs = resize_attrs(
        "half_pixel", [1, size, 3], [1.0, size / 9, 1.0], mode=mode, antialias=True
    )
    # an antialiased tap sum has more than two terms, which numpy may associate otherwise:
    # the float64 sums can differ in their last bit, and so the float32 results by an ulp
    assert_compute_matches_ref("resize", rand(1, 9, 3), rtol=2e-7, atol=0, **attrs)


def test_resize_low_precision_and_saturating_dtypes():
    x = rand(1, 1, 3, 4)
    attrs = resize_attrs("half_pixel", [1, 1, 5, 7], [1.0, 1.0, None, None], mode="linear")
    exact("resize", x.astype("float16"), **attrs)
    attrs["mode"] = "cubic"  # cubic overshoots: uint8 results clamp at 0 and 255
    exact("resize", (x * 200 + 100).clip(0, 255).astype("uint8"), **attrs)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_symbolic(mode):
    # H doubles (a symbolic output dim); W keeps a symbolic size, identity only at run time
    types = [TensorType((1, 1, N, M), "float32")]
    attrs = resize_attrs("half_pixel", [1, 1, N * 2, 5], [1.0, 1.0, 2.0, None], mode=mode)
    func = op_prim_func("resize", types, normalize_attrs(get_op("resize"), attrs))
    assert func is not None
    for n, m in ((2, 5), (3, 3)):
        x = rand(1, 1, n, m)
        concrete = {**attrs, "sizes": [1, 1, evaluate(N * 2, {N: n}), 5]}
        want = ref("resize", x, **concrete)
        out = np.zeros_like(want)
        run_prim_func(func, [x, out])
        np.testing.assert_array_equal(out, want)


def test_resize_without_a_loop_program_stays_an_op_call():
    x = [TensorType((1, N), "float32")]
    attrs = resize_attrs("half_pixel", [1, 4], [1.0, None], mode="linear", antialias=True)
    assert op_prim_func("resize", x, normalize_attrs(get_op("resize"), attrs)) is None


def test_resize_prim_func_roundtrip():
    attrs = resize_attrs("align_corners", [1, 1, N * 2, 5], [1.0, 1.0, 2.0, None], mode="cubic")
    types = [TensorType((1, 1, N, M), "float32")]
    roundtrip(op_prim_func("resize", types, normalize_attrs(get_op("resize"), attrs)))


def test_family_ops_have_loop_programs():
    have = {
        "identity", "reshape", "transpose", "concat", "split", "squeeze", "expand_dims",
        "broadcast_to", "tile", "strided_slice", "pad", "reverse_sequence", "center_crop_pad", "gather", "gather_elements",
        "gather_nd", "array_feature_extractor", "resize",
    }  # fmt: skip
    assert all(get_op(name).compute is not None for name in have)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    values = np.array([-2.0, 7.0], np.float32)
    indices = np.array([[0, 3, -1], [-4, 5, 2]], np.int32)  # negative wrap, 5 is out of range
    exact("one_hot", indices, None, values, depth=4, axis=axis)
    exact("one_hot", np.array([1.5, -1.0, 2.0], np.float32), None, values, depth=3, axis=axis % 2)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_combines_in_the_references_order(reduction):
    rng = np.random.default_rng(11)
    data = rng.standard_normal((4, 5)).astype(np.float32)
    updates = rng.standard_normal((3, 2)).astype(np.float32)  # smaller than data on axis 1
    indices = np.array([[1, -1], [1, 0], [-3, 3]], np.int64)  # duplicates and negatives
    exact("scatter_elements", data, indices, updates, axis=0, reduction=reduction)
    exact("scatter_elements", data, indices.T.copy() % 5, updates.T.copy(), axis=1, reduction=reduction)


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_slices_and_elements(reduction):
    rng = np.random.default_rng(12)
    data = rng.standard_normal((4, 3, 2)).astype(np.float32)
    slices = np.array([[[0], [2]], [[-4], [3]]], np.int64)  # 0 twice (-4 wraps to it)
    exact("scatter_nd", data, slices, rng.standard_normal((2, 2, 3, 2)).astype(np.float32),
          reduction=reduction)
    elements = np.array([[1, 2, 0], [1, 2, 0], [3, -1, 1]], np.int64)
    exact("scatter_nd", data, elements, rng.standard_normal(3).astype(np.float32),
          reduction=reduction)


@pytest.mark.parametrize("mode, seq, starts", [
    ("linear", 3, None), ("linear", 2, [3, 0]), ("circular", 4, [3, 1]), ("circular", 7, [2, 4])])
def test_tensor_scatter_writes_each_row_from_its_index(mode, seq, starts):
    """A KV-cache update along axis 1 of (2, 5, 3); circular writes wrap, and where more
    entries than the cache holds land on one position, the last one stays."""
    rng = np.random.default_rng(13)
    cache = rng.standard_normal((2, 5, 3)).astype(np.float32)
    update = rng.standard_normal((2, seq, 3)).astype(np.float32)
    index = None if starts is None else np.array(starts, np.int64)
    exact("tensor_scatter", cache, update, index, mode=mode, axis=1)
