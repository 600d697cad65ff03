"""Data-movement ops: symbolic shape inference, numpy references, dyn_ variants."""

import itertools

import numpy as np
import pytest

from tcc.ir.errors import ShapeError
from tcc.ir.expr import Var, evaluate, prove_equal
from tcc.ir.graph import TensorType
from tcc.ir.ops.slicing import SLICE_BOUND, slice_length
from tcc.ir.ops.transform import equal_split_sizes, onnx_reshape_shape, resolve_reshape
from tests.helpers import infer, run_op

N = Var("n")


def _arange(*shape, dtype=np.float32):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


# -- reshape ----------------------------------------------------------------------------------


def test_reshape_resolves_zero_and_minus_one_symbolically():
    shape = onnx_reshape_shape((N, 12, 64), [0, 0, -1], allowzero=False)
    assert resolve_reshape((N, 12, 64), shape) == (N, 12, 64)
    assert resolve_reshape((N, 12, 64), [N, -1]) == (N, 768)
    t = infer("reshape", TensorType((N, 12, 64), "float32"), shape=[N * 12, 64])
    assert prove_equal(t.shape[0], N * 12) and t.shape[1] == 64


def test_reshape_allowzero_keeps_zero():
    assert onnx_reshape_shape((0, 3), [3, 0], allowzero=True) == [3, 0]
    assert onnx_reshape_shape((2, 3), [0, 3], allowzero=False) == [2, 3]


@pytest.mark.parametrize(
    "shape, message",
    [([-1, -1], "at most one -1"), ([5, -1], "cannot reshape"), ([7], "cannot reshape")],
)
def test_reshape_rejects_bad_targets(shape, message):
    with pytest.raises(ShapeError, match=message):
        infer("reshape", TensorType((2, 6), "float32"), shape=shape)


def test_dyn_reshape_binds_fresh_dims_at_run_time():
    t = infer("dyn_reshape", TensorType((2, 6), "float32"), TensorType((3,), "int64"))
    assert len(t.shape) == 3 and all(isinstance(d, Var) for d in t.shape)
    y = run_op("dyn_reshape", _arange(2, 6), np.array([0, 3, -1], np.int64))
    np.testing.assert_array_equal(y, _arange(2, 6).reshape(2, 3, 2))


# -- transpose, concat, split -----------------------------------------------------------------


def test_transpose_default_reverses_and_checks_permutation():
    assert infer("transpose", TensorType((N, 2, 3), "float32")).shape == (3, 2, N)
    assert infer("transpose", TensorType((N, 2, 3), "float32"), axes=[1, 0, 2]).shape == (2, N, 3)
    with pytest.raises(ShapeError, match="not a permutation"):
        infer("transpose", TensorType((2, 3), "float32"), axes=[0])
    with pytest.raises(ShapeError, match="repeated axis"):
        infer("transpose", TensorType((2, 3), "float32"), axes=[0, 0])
    x = _arange(2, 3, 4)
    np.testing.assert_array_equal(run_op("transpose", x, axes=[2, 0, 1]), x.transpose(2, 0, 1))


def test_concat_adds_symbolic_extents():
    m = Var("m")
    t = infer("concat", TensorType((N, 3), "float32"), TensorType((m, 3), "float32"), axis=0)
    assert prove_equal(t.shape[0], N + m) and t.shape[1] == 3
    with pytest.raises(ShapeError, match="differs"):
        infer("concat", TensorType((2, 3), "float32"), TensorType((2, 4), "float32"), axis=0)


def test_split_sizes_and_numerics():
    assert equal_split_sizes(10, 3) == [4, 4, 2]
    sizes = equal_split_sizes(N, 2)
    assert all(evaluate(s, {N: 7}) == v for s, v in zip(sizes, [4, 3]))
    t = infer("split", TensorType((N, 6), "float32"), sizes=[2, 4], axis=1)
    assert [f.shape for f in t.fields] == [(N, 2), (N, 4)]
    with pytest.raises(ShapeError, match="sum to"):
        infer("split", TensorType((2, 6), "float32"), sizes=[2, 2], axis=1)


# -- strided slice ----------------------------------------------------------------------------

BOUNDS = [0, 1, 2, 5, -1, -2, -7, SLICE_BOUND, 2**63 - 1, -(2**63)]


@pytest.mark.parametrize("step", [1, 2, -1, -3])
def test_symbolic_slice_length_matches_python_slicing(step):
    """The symbolic length, evaluated at any extent, equals the clamped slice's length."""
    for start, end in itertools.product(BOUNDS, BOUNDS):
        length = slice_length(N, start, end, step)
        for n in range(7):
            want = len(range(*slice(start, end, step).indices(n)))
            assert evaluate(length, {N: n}) == want, (start, end, step, n)


def test_slice_to_int_max_keeps_the_symbolic_axis():
    t = infer(
        "strided_slice",
        TensorType((N, 4), "float32"),
        begin=[0, 1],
        end=[2**63 - 1, -1],
        axes=[0, 1],
        strides=[1, 1],
    )
    assert t.shape == (N, 2)


def test_strided_slice_numerics_and_symbolic_bounds():
    x = _arange(5, 6)
    y = run_op("strided_slice", x, begin=[4, 0], end=[-100, 6], axes=[0, -1], strides=[-2, 3])
    np.testing.assert_array_equal(y, x[4::-2, 0:6:3])
    t = infer(
        "strided_slice", TensorType((8,), "float32"), begin=[0], end=[N], axes=[0], strides=[1]
    )
    assert evaluate(t.shape[0], {N: 3}) == 3 and evaluate(t.shape[0], {N: 30}) == 8


def test_dyn_strided_slice_default_axes_and_steps():
    x = _arange(4, 5)
    y = run_op("dyn_strided_slice", x, np.array([1], np.int64), np.array([3], np.int64))
    np.testing.assert_array_equal(y, x[1:3])
    t = infer("dyn_strided_slice", TensorType((4, 5), "float32"), *[TensorType((1,), "int64")] * 2)
    assert isinstance(t.shape[0], Var) and t.shape[1] == 5


# -- squeeze, expand_dims, broadcast_to, tile ---------------------------------------------------


def test_squeeze_and_expand_dims():
    assert infer("squeeze", TensorType((1, N, 1), "float32"), axes=[0, -1]).shape == (N,)
    with pytest.raises(ShapeError, match="not 1"):
        infer("squeeze", TensorType((2, 3), "float32"), axes=[0])
    assert infer("expand_dims", TensorType((N, 3), "float32"), axes=[0, -1]).shape == (1, N, 3, 1)
    y = run_op("dyn_expand_dims", _arange(2, 3), np.array([1, -1], np.int64))
    assert y.shape == (2, 1, 3, 1)


def test_broadcast_to_and_dyn_variant():
    assert infer("broadcast_to", TensorType((N, 1), "float32"), shape=[N, 4]).shape == (N, 4)
    with pytest.raises(ShapeError, match="do not broadcast"):
        infer("broadcast_to", TensorType((3, 2), "float32"), shape=[3, 4])
    with pytest.raises(ShapeError, match="does not broadcast to"):
        infer("broadcast_to", TensorType((3, 2), "float32"), shape=[3, 1])
    t = infer("dyn_broadcast_to", TensorType((3, 1), "float32"), TensorType((3,), "int64"))
    assert t.shape[1] == 3 and isinstance(t.shape[2], Var)
    y = run_op("dyn_broadcast_to", _arange(3, 1), np.array([2, 1, 4], np.int64))
    np.testing.assert_array_equal(y, np.broadcast_to(_arange(3, 1), (2, 3, 4)))


def test_tile():
    assert infer("tile", TensorType((N, 2), "float32"), repeats=[2, 3]).shape == (N * 2, 6)
    y = run_op("dyn_tile", _arange(2, 2), np.array([1, 3], np.int64))
    np.testing.assert_array_equal(y, np.tile(_arange(2, 2), (1, 3)))


# -- pad --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes_match_numpy(mode):
    x = _arange(3, 4)
    y = run_op("pad", x, pads=[1, 2, 2, 1], mode=mode)
    np.testing.assert_array_equal(y, np.pad(x, [(1, 2), (2, 1)], mode=mode))


def test_pad_fill_value_negative_pads_and_symbolic_shape():
    x = _arange(3, 4)
    y = run_op("pad", x, np.array(7.5, np.float32), pads=[1, -1, 0, -2])
    np.testing.assert_array_equal(y, np.pad(x[:, 1:2], [(1, 0), (0, 0)], constant_values=7.5))
    assert infer("pad", TensorType((N, 4), "float32"), pads=[1, 0, 2, 0]).shape == (N + 3, 4)
    y = run_op("dyn_pad", x, np.array([2, 1], np.int64), None, np.array([-1], np.int64))
    np.testing.assert_array_equal(y, np.pad(x, [(0, 0), (2, 1)]))


# -- generators -------------------------------------------------------------------------------


def test_arange_symbolic_and_float_lengths():
    assert infer("arange", stop=N).shape == (N,)
    t = infer("arange", start=1, stop=N, step=2)
    assert all(evaluate(t.shape[0], {N: n}) == len(range(1, n, 2)) for n in range(6))
    assert infer("arange", start=0.0, stop=1.0, step=0.3, dtype="float32").shape == (4,)
    y = run_op("dyn_arange", *(np.array(v, np.int32) for v in (10, 4, -3)))
    np.testing.assert_array_equal(y, np.arange(10, 4, -3, dtype=np.int32))


def test_full_eye_trilu():
    assert infer("full", shape=[N, 2], value=1.0).shape == (N, 2)
    y = run_op("dyn_full", np.array([2, 3], np.int64), value=4, dtype="int32")
    np.testing.assert_array_equal(y, np.full((2, 3), 4, np.int32))
    np.testing.assert_array_equal(run_op("eye", rows=3, cols=4, k=1), np.eye(3, 4, 1, np.float32))
    x = _arange(2, 3, 4)
    np.testing.assert_array_equal(
        run_op("trilu", x, np.array(-1, np.int64), upper=False), np.tril(x, -1)
    )
    np.testing.assert_array_equal(run_op("trilu", x), np.triu(x))


# -- reverse_sequence, compress, center_crop_pad ------------------------------------------------


def test_reverse_sequence():
    x = _arange(4, 2)
    y = run_op("reverse_sequence", x, np.array([3, 1], np.int64), batch_axis=1, time_axis=0)
    want = x.copy()
    want[:3, 0] = x[2::-1, 0]
    np.testing.assert_array_equal(y, want)


def test_compress_has_a_data_dependent_extent():
    t = infer("compress", TensorType((3, 2), "float32"), TensorType((3,), "bool"), axis=0)
    assert isinstance(t.shape[0], Var) and t.shape[1] == 2
    x, cond = _arange(3, 2), np.array([True, False, True])
    np.testing.assert_array_equal(run_op("compress", x, cond, axis=0), x[[0, 2]])
    np.testing.assert_array_equal(run_op("compress", x, cond), x.reshape(-1)[[0, 2]])


def test_center_crop_pad():
    x = _arange(5, 2)
    y = run_op("center_crop_pad", x, shape=[2, 5], axes=[0, 1])
    want = np.zeros((2, 5), np.float32)
    want[:, 1:3] = x[1:3]
    np.testing.assert_array_equal(y, want)
    t = infer(
        "dyn_center_crop_pad", TensorType((5, 2), "float32"), TensorType((1,), "int64"), axes=[1]
    )
    assert t.shape[0] == 5 and isinstance(t.shape[1], Var)
