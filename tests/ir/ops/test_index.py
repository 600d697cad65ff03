"""Indexing ops: type inference over symbolic shapes, and the numpy references."""

import numpy as np
import pytest

from tcc.ir.errors import ShapeError
from tcc.ir.expr import Var, prove_equal
from tcc.ir.graph import TensorType, TupleType
from tcc.ir.ops.resize import resize_plan, scaled_dim
from tests.helpers import infer, ref, same_shape

n = Var("n")
m = Var("m")


def f32(*shape):
    return TensorType(shape, "float32")


def i64(*shape):
    return TensorType(shape, "int64")


# -- gathers ----------------------------------------------------------------------------------


def test_gather_infer_symbolic_axis():
    t = infer("gather", f32(n, 8, 3), i64(m, 2), axis=0)
    assert same_shape(t.shape, (m, 2, 8, 3)) and t.dtype == "float32"
    assert same_shape(infer("gather", f32(4, n), i64(), axis=-1).shape, (4,))


def test_gather_rejects_bad_operands():
    with pytest.raises(ShapeError, match="int32 or int64"):
        infer("gather", f32(4), f32(2))
    with pytest.raises(ShapeError, match="axis 2 out of range"):
        infer("gather", f32(4, 5), i64(2), axis=2)


def test_gather_ref_negative_and_scalar_indices():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(ref("gather", data, np.array([-1, 0]), axis=0), data[[2, 0]])
    np.testing.assert_array_equal(ref("gather", data, np.array(1), axis=1), data[:, 1])


def test_gather_elements():
    data = np.array([[1, 2], [3, 4]], np.float32)
    idx = np.array([[0, 0], [-1, 0]])
    assert same_shape(infer("gather_elements", f32(n, 2), i64(n, 5), axis=1).shape, (n, 5))
    np.testing.assert_array_equal(ref("gather_elements", data, idx, axis=1), [[1, 1], [4, 3]])
    with pytest.raises(ShapeError, match="rank 2"):
        infer("gather_elements", f32(2, 2), i64(2))


def test_gather_nd_batch_dims():
    assert same_shape(infer("gather_nd", f32(n, 3, 4), i64(n, 5, 1), batch_dims=1).shape, (n, 5, 4))
    assert same_shape(infer("gather_nd", f32(2, 2), i64(2, 2)).shape, (2,))
    data = np.arange(8, dtype=np.int32).reshape(2, 2, 2)
    got = ref("gather_nd", data, np.array([[1], [0]]), batch_dims=1)
    np.testing.assert_array_equal(got, [[2, 3], [4, 5]])
    got = ref("gather_nd", data, np.array([[[0, 1]], [[1, 0]]]))
    np.testing.assert_array_equal(got, [[[2, 3]], [[4, 5]]])
    with pytest.raises(ShapeError, match="must be static"):
        infer("gather_nd", f32(2, 2), i64(2, n))


# -- scatters ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reduction, want",
    # both updates target column 1 (-2 counts from the end); without a reduction the last wins
    [("none", [[1, 5, 3]]), ("add", [[1, 13, 3]]), ("mul", [[1, 60, 3]]), ("min", [[1, 2, 3]])],
)
def test_scatter_elements_reductions(reduction, want):
    data = np.array([[1, 2, 3]], np.float32)
    upd = np.array([[6, 5]], np.float32)
    got = ref("scatter_elements", data, np.array([[1, -2]]), upd, axis=1, reduction=reduction)
    np.testing.assert_array_equal(got, want)
    assert not np.shares_memory(got, data)


def test_scatter_elements_infer_checks():
    assert infer("scatter_elements", f32(n, 4), i64(n, 2), f32(n, 2), axis=1) == f32(n, 4)
    with pytest.raises(ShapeError, match="updates"):
        infer("scatter_elements", f32(3, 4), i64(3, 2), f32(3, 3))
    with pytest.raises(ShapeError, match="unknown reduction"):
        infer("scatter_elements", f32(3), i64(1), f32(1), reduction="avg")


def test_scatter_nd():
    assert infer("scatter_nd", f32(n, 4, 4), i64(2, 1), f32(2, 4, 4)) == f32(n, 4, 4)
    with pytest.raises(ShapeError, match="updates"):
        infer("scatter_nd", f32(8, 4), i64(2, 1), f32(2, 5))
    data = np.zeros((3, 2), np.float32)
    got = ref(
        "scatter_nd", data, np.array([[0], [-1], [0]]), np.ones((3, 2), np.float32), reduction="add"
    )
    np.testing.assert_array_equal(got, [[2, 2], [0, 0], [1, 1]])


def test_tensor_scatter_linear_and_circular():
    cache = np.zeros((2, 4, 1), np.float32)
    update = np.array([[[1], [2]], [[3], [4]]], np.float32)
    assert infer("tensor_scatter", f32(n, 4, 1), f32(n, 2, 1), i64(n)) == f32(n, 4, 1)
    got = ref("tensor_scatter", cache, update, np.array([1, 3]), mode="circular")
    np.testing.assert_array_equal(got[..., 0], [[0, 1, 2, 0], [4, 0, 0, 3]])
    got = ref("tensor_scatter", cache, update, None)
    np.testing.assert_array_equal(got[..., 0], [[1, 2, 0, 0], [3, 4, 0, 0]])


# -- one_hot, nonzero, unique -----------------------------------------------------------------


def test_one_hot_static_and_dynamic_depth():
    t = infer("one_hot", i64(n, 3), None, f32(2), depth=5, axis=1)
    assert same_shape(t.shape, (n, 5, 3))
    dyn = infer("one_hot", i64(3), i64(), f32(2))
    assert dyn.shape[0] == 3 and isinstance(dyn.shape[1], Var)
    got = ref("one_hot", np.array([0, -1, 7]), np.array(3.0), np.array([0, 5], np.float32), axis=0)
    np.testing.assert_array_equal(got, [[5, 0, 0], [0, 0, 0], [0, 5, 0]])


def test_nonzero_has_data_dependent_length():
    t = infer("nonzero", f32(n, 3))
    assert t.shape[0] == 2 and isinstance(t.shape[1], Var)
    x = np.array([[1, 0], [0, 2]], np.float32)
    np.testing.assert_array_equal(ref("nonzero", x), [[0, 1], [0, 1]])


def test_unique_infer_shares_the_unique_count():
    t = infer("unique", f32(n, 4), axis=1)
    assert isinstance(t, TupleType)
    y, first, inverse, counts = t.fields
    assert y.shape[0] is n and y.shape[1] is first.shape[0] is counts.shape[0]
    assert inverse.shape == (4,)
    flat = infer("unique", f32(n, 4)).fields[2]
    assert same_shape(flat.shape, (n * 4,))


def test_unique_unsorted_keeps_first_occurrence_order():
    y, first, inverse, counts = ref(
        "unique", np.array([2, 1, 1, 3, 4, 3], np.float32), sorted=False
    )
    np.testing.assert_array_equal(y, [2, 1, 3, 4])
    np.testing.assert_array_equal(first, [0, 1, 3, 4])
    np.testing.assert_array_equal(inverse, [0, 1, 1, 2, 3, 2])
    np.testing.assert_array_equal(counts, [1, 2, 2, 1])


# -- non_max_suppression, binarize, array_feature_extractor -----------------------------------


def test_non_max_suppression():
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 10, 1, 11]]], np.float32)
    scores = np.array([[[0.9, 0.75, 0.6]]], np.float32)
    t = infer("non_max_suppression", f32(1, 3, 4), f32(1, 1, 3), i64(1), f32(1), f32(1))
    assert t.shape[1] == 3 and isinstance(t.shape[0], Var)
    got = ref(
        "non_max_suppression", boxes, scores, np.array([3]), np.array([0.5], np.float32), None
    )
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 2]])
    none = ref("non_max_suppression", boxes, scores, None, None, None)
    assert none.shape == (0, 3)


def test_binarize_and_array_feature_extractor():
    x = np.array([[0.5, 2.0], [1.0, -1.0]], np.float32)
    np.testing.assert_array_equal(ref("binarize", x, threshold=0.9), [[0, 1], [1, 0]])
    assert infer("array_feature_extractor", f32(n, 5), i64(1, 2)) == f32(n, 2)
    assert infer("array_feature_extractor", f32(5), i64(3)) == f32(1, 3)
    np.testing.assert_array_equal(
        ref("array_feature_extractor", x, np.array([[1]])), [[2.0], [-1.0]]
    )


# -- resize -----------------------------------------------------------------------------------


def test_scaled_dim_is_exact_on_symbolic_dims():
    assert scaled_dim(n, 2.0) is not None and prove_equal(scaled_dim(n, 2.0), n * 2)
    assert scaled_dim(10, 0.6) == 6
    half = scaled_dim(n, 0.5)
    assert prove_equal(half, n // 2)


def test_resize_plan_scales_sizes_and_aspect_policy():
    out, scales = resize_plan((n, 3, 4, 4), [1.0, 1.0, 2.0, 0.5], None, None)
    assert same_shape(out, (n, 3, 8, 2)) and scales == [1.0, 1.0, 2.0, 0.5]
    out, scales = resize_plan((n, 3, 4, 4), None, [m, 9], [0, 3])
    assert same_shape(out, (m, 3, 4, 9)) and scales == [None] * 4
    out, scales = resize_plan((1, 1, 2, 2), None, [7, 8], [2, 3], "not_larger")
    assert out == [1, 1, 7, 7] and scales == [1.0, 1.0, 3.5, 3.5]


def test_resize_infer():
    t = infer("resize", f32(n, 3, 4, 4), sizes=[n, 3, 8, 8], scales=[1.0, 1.0, 2.0, 2.0])
    assert same_shape(t.shape, (n, 3, 8, 8))
    dyn = infer("resize_dynamic", f32(n, 3, 4, 4), None, f32(2), None, axes=[2, 3])
    assert dyn.shape[:2] == (n, 3) and all(isinstance(d, Var) for d in dyn.shape[2:])
    with pytest.raises(ShapeError, match="unknown mode"):
        infer("resize", f32(4), sizes=[8], scales=[2.0], mode="area")
    with pytest.raises(ShapeError, match="roi"):
        infer(
            "resize",
            f32(4),
            sizes=[8],
            scales=[2.0],
            coordinate_transformation_mode="tf_crop_and_resize",
        )


def test_resize_linear_matches_hand_computation():
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    got = ref("resize", x, sizes=[2, 4], scales=[1.0, 2.0], mode="linear")
    # half_pixel: output column j samples input column (j + 0.5) / 2 - 0.5, clamped at edges
    np.testing.assert_allclose(got, [[1, 1.25, 1.75, 2], [3, 3.25, 3.75, 4]])


def test_resize_nearest_rounding_modes():
    x = np.arange(4, dtype=np.float32)
    for mode, want in [("floor", [0, 0, 1, 1, 2, 2, 3, 3]), ("ceil", [0, 1, 1, 2, 2, 3, 3, 3])]:
        got = ref(
            "resize",
            x,
            sizes=[8],
            scales=[2.0],
            nearest_mode=mode,
            coordinate_transformation_mode="asymmetric",
        )
        np.testing.assert_array_equal(got, want)


def test_resize_integer_input_rounds_and_saturates():
    x = np.array([0, 255], np.uint8)
    got = ref("resize", x, sizes=[4], scales=[2.0], mode="cubic")
    assert got.dtype == np.uint8 and got[0] == 0 and got[-1] == 255
